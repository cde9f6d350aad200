// The official Anthropic SDK (@anthropic-ai/sdk) through tether (issue 28): messages.create,
// messages.stream and messages.countTokens against an `api = "anthropic"` upstream (tether-mock
// speaks the Messages API); a call aborted with the SDK's own signal, mid-stream or while
// waiting, closes the upstream connection at once; at the SDK's DEFAULT retries a call tether
// has given its budget is one request to tether.
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import Anthropic from '@anthropic-ai/sdk';

import {counting_fetch, margin_ms, start_stack, upstream_requests, wait_for_upstream_close,
        wait_for_upstream_request} from './harness.mjs';

const test_timeout = {timeout: 30_000};
// The bound from the caller's abort to the upstream's close; more under the sanitizers.
const cancel_bound_ms = process.env.TETHER_SANITIZED === '1' ? 1_000 : 100;
const upstream_key = 'sk-ant-e2e-upstream';

function anthropic_config(mock_port) {
  const model = (name, upstream_model, more = '') => `[[models]]
name = "${name}"
upstream = "claude"
upstream_model = "${upstream_model}"
${more}
`;
  return `[server]
listen = "127.0.0.1:0"

[request]
deadline_ms = 10000
attempt_timeout_ms = 5000
max_retries = 2
retry_backoff_ms = 10

[[upstreams]]
name = "claude"
base_url = "http://127.0.0.1:${mock_port}"
api = "anthropic"
api_key_env = "TETHER_E2E_ANTHROPIC_KEY"
max_in_flight = 16

${model('claude-test', 'mock')}
${model('claude-stream', 'mock-stream-5x100')}
${model('claude-slow-stream', 'mock-stream-50x100')}
${model('claude-slow', 'mock-delay-5000')}
${model('claude-hang', 'mock-hang')}
${model('claude-exhausted', 'mock-fail-503')}
[telemetry]
log_format = "json"
`;
}

const user = (content) => [{role: 'user', content}];

async function assert_cancelled(stack, request_id, aborted_at, expect) {
  const upstream = await wait_for_upstream_close(stack, request_id);
  assert.equal(upstream.path, '/v1/messages');
  assert.equal(upstream.model, expect.upstream_model);
  const close_ms = upstream.closed_ms - aborted_at;
  console.log(`[ figures ] anthropic ${request_id}: upstream closed ${close_ms.toFixed(1)} ms ` +
              'after the abort');
  assert.ok(close_ms <= cancel_bound_ms,
            `upstream closed ${close_ms.toFixed(1)} ms after the caller aborted`);
  assert.ok(upstream.work_owed_ms > 0, 'the upstream was stopped before its work was done');
  const entry = await stack.wait_for_access(request_id);
  assert.equal(entry.outcome, 'client_disconnected');
  assert.equal(entry.status, 499);
  assert.equal(entry.stream, expect.stream);
  assert.equal(upstream_requests(await stack.mock_stats(), request_id).length, 1,
               'an abandoned request is not retried');
}

describe('the Anthropic SDK through tether', {timeout: 150_000}, () => {
  let stack;
  let client;  // no retries: each call is one request
  let defaults;  // the SDK's defaults (2 retries), counting what it sends
  const counter = counting_fetch();
  let calls = 0;
  let sent_version = null;  // the anthropic-version the SDK sent last

  before(async () => {
    stack = await start_stack(anthropic_config, {TETHER_E2E_ANTHROPIC_KEY: upstream_key});
    client = new Anthropic({
      baseURL: stack.gateway_url,
      apiKey: 'caller-key',
      maxRetries: 0,
      timeout: 15_000,
      fetch: (input, init) => {
        sent_version = new Headers(init?.headers).get('anthropic-version');
        return fetch(input, init);
      },
    });
    defaults = new Anthropic({baseURL: stack.gateway_url, apiKey: 'caller-key',
                              fetch: counter.fetch});
    assert.equal(defaults.maxRetries, 2);
    // The first call pays for the SDK's lazy set-up and the connection: not a deadline's cost.
    await defaults.messages.create({model: 'claude-test', max_tokens: 16, messages: user('hi')});
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  test('messages.create returns the message, sent upstream with the upstream key', test_timeout,
       async () => {
         const request_id = 'anthropic-create';
         const message = await client.messages.create(
             {model: 'claude-test', max_tokens: 64, messages: user('Say something')},
             {headers: {'x-request-id': request_id}});
         assert.equal(message.type, 'message');
         assert.equal(message.role, 'assistant');
         assert.equal(message.content[0].type, 'text');
         assert.ok(message.content[0].text.length > 0);
         assert.ok(message.usage.input_tokens > 0);
         assert.ok(message.usage.output_tokens > 0);
         const [upstream] = upstream_requests(await stack.mock_stats(), request_id);
         assert.equal(upstream.path, '/v1/messages');
         assert.equal(upstream.headers['x-api-key'], upstream_key);
         assert.ok(sent_version, 'the SDK sends its API version');
         assert.equal(upstream.headers['anthropic-version'], sent_version, 'passed on as sent');
         assert.equal(upstream.headers.authorization, undefined);
         const entry = await stack.wait_for_access(request_id);
         assert.equal(entry.outcome, 'ok');
         assert.equal(entry.path, '/v1/messages');
       });

  test('messages.stream yields each text delta as it arrives and the final message',
       test_timeout, async () => {
         const request_id = 'anthropic-stream';
         const stream = client.messages.stream(
             {model: 'claude-stream', max_tokens: 64, messages: user('count')},
             {headers: {'x-request-id': request_id}});
         const arrivals = [];
         const names = [];
         for await (const event of stream) {
           names.push(event.type);
           if (event.type === 'content_block_delta') arrivals.push(performance.now());
         }
         const final = await stream.finalMessage();
         assert.equal(names[0], 'message_start');
         assert.equal(names.at(-1), 'message_stop');
         assert.equal(arrivals.length, 5);
         // The mock sends one every 100 ms: relayed as they came, not gathered at the end.
         assert.ok(arrivals[4] - arrivals[0] > 250, `deltas came within ${arrivals[4] - arrivals[0]} ms`);
         assert.equal(final.stop_reason, 'end_turn');
         assert.ok(final.content[0].text.length > 0);
         const entry = await stack.wait_for_access(request_id);
         assert.equal(entry.outcome, 'ok');
         assert.equal(entry.stream, true);
       });

  test('messages.countTokens returns the count', test_timeout, async () => {
    const count = await client.messages.countTokens(
        {model: 'claude-test', messages: user('how many tokens is this')},
        {headers: {'x-request-id': 'anthropic-count'}});
    assert.ok(count.input_tokens > 0);
    const [upstream] = upstream_requests(await stack.mock_stats(), 'anthropic-count');
    assert.equal(upstream.path, '/v1/messages/count_tokens');
  });

  test('an unknown model raises NotFoundError with an Anthropic error body', test_timeout,
       async () => {
         await assert.rejects(
             client.messages.create({model: 'no-such-model', max_tokens: 8, messages: user('x')}),
             (err) => {
               assert.ok(err instanceof Anthropic.NotFoundError, `got ${err}`);
               assert.equal(err.status, 404);
               assert.equal(err.error.type, 'error');
               assert.equal(err.error.error.type, 'not_found_error');
               assert.equal(err.headers.get('x-tether-outcome'), 'unknown_model');
               return true;
             });
       });

  test('a stream aborted with the SDK\'s signal after its first text closes the upstream',
       test_timeout, async () => {
         const request_id = 'anthropic-abort-stream';
         const controller = new AbortController();
         const stream = client.messages.stream(
             {model: 'claude-slow-stream', max_tokens: 64, messages: user('long')},
             {signal: controller.signal, headers: {'x-request-id': request_id}});
         let aborted_at = null;
         let deltas = 0;
         const failure = await (async () => {
                           for await (const event of stream) {
                             if (event.type !== 'content_block_delta') continue;
                             ++deltas;
                             if (aborted_at === null) {
                               aborted_at = Date.now();
                               controller.abort();
                             }
                           }
                         })().then(() => null, (e) => e);
         if (failure !== null) {
           assert.ok(failure instanceof Anthropic.APIUserAbortError || failure.name === 'AbortError',
                     `unexpected ${failure}`);
         }
         assert.ok(aborted_at !== null, 'a first delta arrived');
         assert.ok(deltas < 50, 'the stream stopped early');
         await assert_cancelled(stack, request_id, aborted_at,
                                {upstream_model: 'mock-stream-50x100', stream: true});
       });

  test('a call aborted while waiting closes the upstream', test_timeout, async () => {
    const request_id = 'anthropic-abort-whole';
    const controller = new AbortController();
    let aborted_at = null;
    const call = assert.rejects(
        client.messages.create({model: 'claude-slow', max_tokens: 8, messages: user('long')},
                               {signal: controller.signal, headers: {'x-request-id': request_id}}),
        Anthropic.APIUserAbortError);
    call.catch(() => {});  // awaited below: a rejection before then is not unhandled
    try {
      // Waiting: the upstream has the request and answers in 5 s.
      await wait_for_upstream_request(stack, request_id);
      aborted_at = Date.now();
    } finally {
      controller.abort();
    }
    await call;
    await assert_cancelled(stack, request_id, aborted_at,
                           {upstream_model: 'mock-delay-5000', stream: false});
  });

  // One call at the SDK's defaults; what it ended with and what tether and the upstream saw.
  async function one_call(model, headers = {}) {
    const request_id = `anthropic-default-${model}-${++calls}`;
    const started = performance.now();
    let error = null;
    try {
      await defaults.messages.create({model, max_tokens: 8, messages: user('hello')},
                                     {headers: {'x-request-id': request_id, ...headers}});
    } catch (err) {
      error = err;
    }
    const waited_ms = performance.now() - started;
    const tries = await stack.wait_for_tries(request_id, counter.sent(request_id));
    const upstream = upstream_requests(await stack.mock_stats(), request_id);
    console.log(`[ figures ] anthropic ${model} ${JSON.stringify(headers)}: ` +
                `${tries.length} request(s) to tether, ${upstream.length} upstream, ` +
                `waited ${waited_ms.toFixed(0)} ms, ended ${error ? error.status : 'ok'}`);
    return {error, waited_ms, tries, upstream};
  }

  test('default retries: a passed deadline is one request to tether, within the deadline',
       test_timeout, async () => {
         const r = await one_call('claude-hang', {'x-request-deadline-ms': '300'});
         assert.equal(r.error?.status, 504);
         assert.equal(r.error.error.error.type, 'timeout_error');
         assert.equal(r.error.headers.get('x-should-retry'), 'false');
         assert.equal(r.tries.length, 1);
         assert.equal(r.tries[0].outcome, 'deadline_exceeded');
         assert.equal(r.tries[0].client_retry, 0);
         assert.equal(r.upstream.length, 1);
         assert.ok(r.waited_ms < 300 + margin_ms, `waited ${r.waited_ms} ms`);
       });

  test('default retries: an exhausted upstream is one request to tether (its own retries only)',
       test_timeout, async () => {
         const r = await one_call('claude-exhausted');
         assert.equal(r.error?.status, 502);
         assert.equal(r.error.error.error.type, 'api_error');
         assert.equal(r.error.headers.get('x-should-retry'), 'false');
         assert.equal(r.tries.length, 1);
         assert.equal(r.tries[0].outcome, 'upstream_failed');
         assert.equal(r.tries[0].attempts.length, 3);  // max_retries = 2, tether's
         assert.equal(r.upstream.length, 3);
       });
});
