// One call, one budget (issue 25) with the Vercel AI SDK (`ai` + `@ai-sdk/openai`): it retries
// 408/409/429/5xx by status alone, ignoring x-should-retry, with a fresh budget per retry. At
// its defaults that is recorded (printed), not asserted; with the setting the README recommends
// (maxRetries: 0) one call is one request to tether and ends within its deadline.
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import {createOpenAI} from '@ai-sdk/openai';
import {embed, generateText} from 'ai';

import {counting_fetch, margin_ms, one_call_config, start_stack, upstream_requests} from './harness.mjs';

describe('Vercel AI SDK through tether', {timeout: 150_000}, () => {
  let stack;
  let provider;
  let calls = 0;
  const counter = counting_fetch();

  before(async () => {
    stack = await start_stack(one_call_config);
    provider = createOpenAI({baseURL: stack.base_url, apiKey: 'unused', fetch: counter.fetch});
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  // One generateText call on `.chat()` or `.completion()`; `settings` are the call's own
  // (maxRetries absent = the SDK's default).
  async function one_call(kind, model, settings = {}, headers = {}) {
    const request_id = `ai-sdk-${kind}-${model}-${++calls}`;
    const started = performance.now();
    let error = null;
    try {
      await generateText({
        model: kind === 'chat' ? provider.chat(model) : provider.completion(model),
        prompt: 'hello',
        headers: {'x-request-id': request_id, ...headers},
        ...settings,
      });
    } catch (err) {
      error = err;
    }
    const waited_ms = performance.now() - started;
    const tries = await stack.wait_for_tries(request_id, counter.sent(request_id));
    const upstream = upstream_requests(await stack.mock_stats(), request_id);
    console.log(`[ figures ] ai-sdk ${kind} ${model} ${JSON.stringify(settings)} ` +
                `${JSON.stringify(headers)}: ${tries.length} request(s) to tether, ` +
                `${upstream.length} upstream, waited ${waited_ms.toFixed(0)} ms`);
    return {error, waited_ms, tries, upstream};
  }

  test('at its defaults a passed deadline is retried by status (recorded)', {timeout: 30_000},
       async () => {
         const r = await one_call('chat', 'hang', {}, {'x-request-deadline-ms': '300'});
         assert.ok(r.error);
         // By tether's design each request kept its own deadline, whatever the SDK did after.
         assert.ok(r.tries.length >= 1);
         for (const t of r.tries) {
           assert.equal(t.outcome, 'deadline_exceeded');
           assert.ok(t.duration_ms < 300 + margin_ms, `${t.duration_ms} ms`);
         }
       });

  for (const kind of ['chat', 'completion']) {
    test(`${kind}, maxRetries 0: a passed deadline is one request, within the deadline`,
         {timeout: 20_000}, async () => {
           const r = await one_call(kind, 'hang', {maxRetries: 0}, {'x-request-deadline-ms': '300'});
           assert.equal(r.error?.statusCode ?? r.error?.lastError?.statusCode, 504);
           assert.equal(r.tries.length, 1);
           assert.equal(r.tries[0].outcome, 'deadline_exceeded');
           assert.equal(r.upstream.length, 1);
           assert.ok(r.waited_ms < 300 + margin_ms, `waited ${r.waited_ms} ms`);
         });

    test(`${kind}, maxRetries 0: an exhausted upstream is one request`, {timeout: 20_000},
         async () => {
           const r = await one_call(kind, 'exhausted', {maxRetries: 0});
           assert.equal(r.error?.statusCode, 502);
           assert.equal(r.tries.length, 1);
           assert.equal(r.upstream.length, 3);  // tether's own max_retries = 2
           assert.ok(r.waited_ms < 10_000 + margin_ms, `waited ${r.waited_ms} ms`);
         });

    test(`${kind}, maxRetries 0: an upstream timeout is one request`, {timeout: 20_000},
         async () => {
           const r = await one_call(kind, 'slow-attempts', {maxRetries: 0},
                                    {'x-request-deadline-ms': '2000'});
           assert.equal(r.error?.statusCode, 504);
           assert.equal(r.tries.length, 1);
           assert.equal(r.tries[0].outcome, 'upstream_timeout');
           assert.ok(r.waited_ms < 2000 + margin_ms, `waited ${r.waited_ms} ms`);
         });
  }

  test('embed, maxRetries 0: a passed deadline is one request', {timeout: 20_000}, async () => {
    const request_id = `ai-sdk-embed-${++calls}`;
    const started = performance.now();
    await assert.rejects(embed({
      model: provider.embedding('hang'),
      value: 'hello',
      maxRetries: 0,
      headers: {'x-request-id': request_id, 'x-request-deadline-ms': '300'},
    }));
    const waited_ms = performance.now() - started;
    assert.equal(counter.sent(request_id), 1);
    assert.equal((await stack.wait_for_tries(request_id, 1)).length, 1);
    assert.ok(waited_ms < 300 + margin_ms, `waited ${waited_ms} ms`);
  });
});
