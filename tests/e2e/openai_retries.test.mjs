// One call, one budget (issue 25): the official openai SDK at its DEFAULT settings (maxRetries
// not set: 2 retries) obeys tether's x-should-retry, so a call that tether has already given its
// budget (a passed deadline, an exhausted upstream, an upstream timeout) is one request to
// tether and ends within its deadline; where tether asks for a retry (503 overloaded) the SDK
// waits the retry-after-ms it was given and tries again. On every surface.
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import OpenAI from 'openai';

import {counting_fetch, hold_tiny_slot, margin_ms, one_call_config, start_stack, upstream_requests} from
    './harness.mjs';

const test_timeout = {timeout: 30_000};

// The four surfaces, each called as a user's code would, with per-call request options.
const surfaces = {
  chat: (client, model, options) => client.chat.completions.create(
      {model, messages: [{role: 'user', content: 'hello'}]}, options),
  completions: (client, model, options) =>
      client.completions.create({model, prompt: 'hello'}, options),
  embeddings: (client, model, options) =>
      client.embeddings.create({model, input: 'hello'}, options),
  responses: (client, model, options) => client.responses.create({model, input: 'hello'}, options),
};

describe('openai SDK at its default retries through tether', {timeout: 120_000}, () => {
  let stack;
  let client;
  let calls = 0;
  const counter = counting_fetch();

  before(async () => {
    stack = await start_stack(one_call_config);
    // Defaults on purpose: no maxRetries, no timeout.
    client = new OpenAI({baseURL: stack.base_url, apiKey: 'unused', fetch: counter.fetch});
    assert.equal(client.maxRetries, 2);
    // The first call pays for the SDK's lazy set-up and the connection: not a deadline's cost.
    await client.chat.completions.create({model: 'ok', messages: [{role: 'user', content: 'hi'}]});
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  // Calls `surface` once with its own request id; resolves to what the call ended with and what
  // tether and the upstream saw of it.
  async function one_call(surface, model, headers = {}) {
    const request_id = `openai-${surface}-${model}-${++calls}`;
    const started = performance.now();
    let error = null;
    let response = null;
    try {
      response = await surfaces[surface](
          client, model, {headers: {'x-request-id': request_id, ...headers}});
    } catch (err) {
      error = err;
    }
    const waited_ms = performance.now() - started;
    const tries = await stack.wait_for_tries(request_id, counter.sent(request_id));
    const upstream = upstream_requests(await stack.mock_stats(), request_id);
    console.log(`[ figures ] openai ${surface} ${model} ${JSON.stringify(headers)}: ` +
                `${tries.length} request(s) to tether, ${upstream.length} upstream, ` +
                `waited ${waited_ms.toFixed(0)} ms, ended ${error ? error.status : 'ok'}`);
    return {request_id, error, response, waited_ms, tries, upstream};
  }

  for (const surface of Object.keys(surfaces)) {
    test(`${surface}: a passed deadline is one request to tether, within the deadline`,
         test_timeout, async () => {
           const r = await one_call(surface, 'hang', {'x-request-deadline-ms': '300'});
           assert.equal(r.error?.status, 504);
           assert.equal(r.error.headers.get('x-should-retry'), 'false');
           assert.equal(r.error.headers.get('x-tether-outcome'), 'deadline_exceeded');
           assert.equal(r.tries.length, 1);
           assert.equal(r.tries[0].outcome, 'deadline_exceeded');
           assert.equal(r.tries[0].client_retry, 0);
           assert.equal(r.upstream.length, 1);
           assert.ok(r.waited_ms < 300 + margin_ms, `waited ${r.waited_ms} ms`);
         });

    test(`${surface}: an exhausted upstream is one request to tether (tether's own retries only)`,
         test_timeout, async () => {
           const r = await one_call(surface, 'exhausted');
           assert.equal(r.error?.status, 502);
           assert.equal(r.error.headers.get('x-should-retry'), 'false');
           assert.equal(r.tries.length, 1);
           assert.equal(r.tries[0].outcome, 'upstream_failed');
           assert.equal(r.tries[0].attempts.length, 3);  // max_retries = 2, tether's
           assert.equal(r.upstream.length, 3);
           assert.ok(r.waited_ms < 10_000 + margin_ms, `waited ${r.waited_ms} ms`);
         });

    test(`${surface}: an upstream timeout is one request to tether`, test_timeout, async () => {
      const r = await one_call(surface, 'slow-attempts', {'x-request-deadline-ms': '2000'});
      assert.equal(r.error?.status, 504);
      assert.equal(r.error.headers.get('x-should-retry'), 'false');
      assert.equal(r.tries.length, 1);
      assert.equal(r.tries[0].outcome, 'upstream_timeout');
      assert.equal(r.upstream.length, 2);  // two attempts of 200 ms, tether's
      assert.ok(r.waited_ms < 2000 + margin_ms, `waited ${r.waited_ms} ms`);
    });

    test(`${surface}: overloaded asks for a retry, and the SDK waits retry-after-ms first`,
         test_timeout, async () => {
           const hold = await hold_tiny_slot(stack, `hold-${surface}-${++calls}`);
           const request_id = `openai-${surface}-overloaded-${++calls}`;
           const started = performance.now();
           const call = surfaces[surface](client, 'tiny', {headers: {'x-request-id': request_id}});
           // The first try is refused while the slot is held; then the slot is given back, well
           // inside the second tether asked the SDK to wait.
           const refused = await stack.wait_for_access(request_id);
           assert.equal(refused.outcome, 'overloaded');
           await hold.release();
           const answer = await call;
           const waited_ms = performance.now() - started;
           assert.ok(answer);
           const tries = await stack.wait_for_tries(request_id, counter.sent(request_id));
           console.log(`[ figures ] openai ${surface} overloaded: ${tries.length} request(s) to ` +
                       `tether, waited ${waited_ms.toFixed(0)} ms`);
           assert.equal(tries.length, 2);
           assert.deepEqual(tries.map((t) => t.client_retry), [0, 1]);
           assert.deepEqual(tries.map((t) => t.outcome), ['overloaded', 'ok']);
           // The retry came after the 1000 ms tether asked for (retry-after-ms), not the SDK's
           // own backoff (0.5 s first), and not much later.
           assert.ok(waited_ms >= 1000, `waited ${waited_ms} ms`);
           assert.ok(waited_ms < 1000 + 2 * margin_ms, `waited ${waited_ms} ms`);
         });
  }

  test('a 429 whose Retry-After does not fit the caller\'s deadline is one request', test_timeout,
       async () => {
         const r = await one_call('chat', 'limited', {'x-request-deadline-ms': '5000'});
         assert.equal(r.error?.status, 429);
         assert.equal(r.error.headers.get('x-should-retry'), 'false');
         assert.equal(r.error.headers.get('retry-after-ms'), '30000');
         assert.equal(r.tries.length, 1);
         assert.equal(r.upstream.length, 1);
         assert.ok(r.waited_ms < margin_ms, `waited ${r.waited_ms} ms`);
       });
});
