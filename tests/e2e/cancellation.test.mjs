// A caller that gives up (an AbortController in the openai SDK) must cost the upstream nothing
// more: tether closes the upstream connection within 100 ms, on every surface, and logs the
// request as client_disconnected (499).
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import OpenAI from 'openai';

import {start_stack, upstream_requests, wait_for_upstream_close, wait_for_upstream_request} from
    './harness.mjs';

const test_timeout = {
  timeout: 20_000
};
// The bound from the caller's abort to the upstream's close; more under the sanitizers.
const cancel_bound_ms = process.env.TETHER_SANITIZED === '1' ? 1_000 : 100;

async function assert_cancelled_everywhere(stack, request_id, aborted_at, expect) {
  const upstream = await wait_for_upstream_close(stack, request_id);
  assert.equal(upstream.model, expect.upstream_model);
  assert.equal(upstream.path, expect.path);
  const close_ms = upstream.closed_ms - aborted_at;
  console.log(`[ figures ] openai ${request_id}: upstream closed ${close_ms.toFixed(1)} ms after ` +
              'the abort');
  assert.ok(
      close_ms <= cancel_bound_ms,
      `upstream closed ${close_ms.toFixed(1)} ms after the caller aborted`);
  assert.ok(upstream.work_owed_ms > 0, 'the upstream was stopped before its work was done');
  assert.equal(
      upstream_requests(await stack.mock_stats(), request_id).length, 1,
      'an abandoned request is not retried');

  const entry = await stack.wait_for_access(request_id);
  assert.equal(entry.outcome, 'client_disconnected');
  assert.equal(entry.status, 499);
  assert.equal(entry.stream, expect.stream);
  assert.equal(entry.model, expect.model);
  assert.equal(
      stack.access_log().filter((e) => e.request_id === request_id).length, 1,
      'exactly one outcome per request');
}

describe('caller aborts through the openai SDK', {timeout: 120_000}, () => {
  let stack;
  let client;

  before(async () => {
    stack = await start_stack();
    client =
        new OpenAI({baseURL: stack.base_url, apiKey: 'unused', maxRetries: 0, timeout: 15_000});
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  const streaming_surfaces = [
    {
      name: 'chat completion',
      path: '/v1/chat/completions',
      call: (options) => client.chat.completions.create(
          {model: 'slow-stream', messages: [{role: 'user', content: 'long'}], stream: true},
          options),
      text: (chunk) => chunk.choices[0]?.delta?.content,
    },
    {
      name: 'completion',
      path: '/v1/completions',
      call: (options) =>
          client.completions.create({model: 'slow-stream', prompt: 'long', stream: true}, options),
      text: (chunk) => chunk.choices[0]?.text,
    },
    {
      name: 'responses',
      path: '/v1/responses',
      call: (options) =>
          client.responses.create({model: 'slow-stream', input: 'long', stream: true}, options),
      // Its first events (response.created, ...) carry no text; the deltas do.
      text: (event) => event.type === 'response.output_text.delta' ? event.delta : undefined,
    },
  ];

  for (const surface of streaming_surfaces) {
    test(
        `${surface.name} stream aborted after its first text closes the upstream`, test_timeout,
        async () => {
          const request_id = `e2e-abort-stream-${surface.path.replaceAll('/', '.')}`;
          const controller = new AbortController();
          const stream = await surface.call(
              {signal: controller.signal, headers: {'X-Request-Id': request_id}});
          let aborted_at = null;
          const texts = [];
          // openai 6.x ends the iteration quietly when its own signal aborts a stream; an abort
          // error is accepted too, anything else is a failure.
          const failure = await (async () => {
                            for await (const chunk of stream) {
                              const text = surface.text(chunk);
                              if (!text) continue;
                              texts.push(text);
                              if (aborted_at === null) {
                                aborted_at = Date.now();
                                controller.abort();
                              }
                            }
                          })().then(() => null, (e) => e);

          if (failure !== null) {
            assert.ok(
                failure instanceof OpenAI.APIUserAbortError || failure.name === 'AbortError',
                `unexpected ${failure}`);
          }
          assert.ok(aborted_at !== null, 'a first chunk carrying text arrived');
          assert.ok(texts.length < 50, 'the stream stopped early');
          await assert_cancelled_everywhere(stack, request_id, aborted_at, {
            upstream_model: 'mock-stream-50x100',
            path: surface.path,
            stream: true,
            model: 'slow-stream',
          });
        });
  }

  const whole_surfaces = [
    {
      name: 'chat completion',
      path: '/v1/chat/completions',
      call: (options) => client.chat.completions.create(
          {model: 'slow', messages: [{role: 'user', content: 'long'}]}, options),
    },
    {
      name: 'completion',
      path: '/v1/completions',
      call: (options) => client.completions.create({model: 'slow', prompt: 'long'}, options),
    },
    {
      name: 'embeddings',
      path: '/v1/embeddings',
      call: (options) => client.embeddings.create(
          {model: 'slow', input: 'long', encoding_format: 'float'}, options),
    },
    {
      name: 'responses',
      path: '/v1/responses',
      call: (options) => client.responses.create({model: 'slow', input: 'long'}, options),
    },
  ];

  for (const surface of whole_surfaces) {
    test(`${surface.name} aborted while waiting closes the upstream`, test_timeout, async () => {
      const request_id = `e2e-abort-whole-${surface.path.replaceAll('/', '.')}`;
      const controller = new AbortController();
      let aborted_at = null;
      const call = assert.rejects(
          surface.call({signal: controller.signal, headers: {'X-Request-Id': request_id}}),
          OpenAI.APIUserAbortError);
      call.catch(() => {});  // awaited below: a rejection before then is not unhandled
      try {
        // Waiting: the upstream has the request and answers in 5 s.
        await wait_for_upstream_request(stack, request_id);
        aborted_at = Date.now();
      } finally {
        controller.abort();
      }
      await call;

      await assert_cancelled_everywhere(stack, request_id, aborted_at, {
        upstream_model: 'mock-delay-5000',
        path: surface.path,
        stream: false,
        model: 'slow',
      });
    });
  }
});
