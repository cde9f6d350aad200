// One call, one budget (issue 25) with LangChain JS (`@langchain/openai`): its own retry loop
// (6 retries by default, exponential backoff from 1 s with jitter) retries by status and
// ignores x-should-retry, each retry with a fresh budget. At its defaults the first seconds are
// recorded (the call is aborted then: run to the end it takes minutes); with the setting the
// README recommends (maxRetries: 0) one call is one request to tether within its deadline.
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import {ChatOpenAI, OpenAI as LangChainOpenAI} from '@langchain/openai';

import {counting_fetch, margin_ms, one_call_config, start_stack, upstream_requests} from './harness.mjs';

describe('LangChain JS through tether', {timeout: 120_000}, () => {
  let stack;
  let calls = 0;
  const counter = counting_fetch();

  before(async () => {
    stack = await start_stack(one_call_config);
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  // One invoke of a chat model or a completions (LLM) model; `settings` as the user passes them
  // to the constructor (maxRetries absent = LangChain's default); `signal` bounds the call.
  async function one_call(kind, model, settings = {}, headers = {}, signal = undefined) {
    const request_id = `langchain-${kind}-${model}-${++calls}`;
    const options = {
      model,
      apiKey: 'unused',
      configuration: {
        baseURL: stack.base_url,
        defaultHeaders: {'x-request-id': request_id, ...headers},
        fetch: counter.fetch,
      },
      ...settings,
    };
    const llm = kind === 'chat' ? new ChatOpenAI(options) : new LangChainOpenAI(options);
    const started = performance.now();
    let error = null;
    try {
      await llm.invoke('hello', signal ? {signal} : {});
    } catch (err) {
      error = err;
    }
    const waited_ms = performance.now() - started;
    const tries = await stack.wait_for_tries(request_id, counter.sent(request_id));
    const upstream = upstream_requests(await stack.mock_stats(), request_id);
    console.log(`[ figures ] langchain ${kind} ${model} ${JSON.stringify(settings)} ` +
                `${JSON.stringify(headers)}${signal ? ' (aborted at 3.5 s)' : ''}: ` +
                `${tries.length} request(s) to tether, ${upstream.length} upstream, waited ` +
                `${waited_ms.toFixed(0)} ms`);
    return {error, waited_ms, tries, upstream};
  }

  test('at its defaults a passed deadline is retried by status (first 3.5 s recorded)',
       {timeout: 20_000}, async () => {
         const r = await one_call('chat', 'hang', {}, {'x-request-deadline-ms': '300'},
                                  AbortSignal.timeout(3_500));
         assert.ok(r.error);
         assert.ok(r.tries.length >= 1);
         // The abort may land during a try: that one the caller left.
         for (const t of r.tries.filter((t) => t.outcome !== 'client_disconnected')) {
           assert.equal(t.outcome, 'deadline_exceeded');
           assert.ok(t.duration_ms < 300 + margin_ms, `${t.duration_ms} ms`);
         }
       });

  test('at its defaults an exhausted upstream is retried by status (first 3.5 s recorded)',
       {timeout: 20_000}, async () => {
         const r = await one_call('chat', 'exhausted', {}, {}, AbortSignal.timeout(3_500));
         assert.ok(r.error);
         assert.ok(r.tries.length >= 1);
         // tether's own retries stay at max_retries per request whatever the SDK does.
         assert.ok(r.upstream.length <= 3 * r.tries.length);
       });

  for (const kind of ['chat', 'completion']) {
    test(`${kind}, maxRetries 0: a passed deadline is one request, within the deadline`,
         {timeout: 20_000}, async () => {
           const r = await one_call(kind, 'hang', {maxRetries: 0}, {'x-request-deadline-ms': '300'});
           assert.equal(r.error?.status, 504);
           assert.equal(r.tries.length, 1);
           assert.equal(r.upstream.length, 1);
           assert.ok(r.waited_ms < 300 + margin_ms, `waited ${r.waited_ms} ms`);
         });

    test(`${kind}, maxRetries 0: an exhausted upstream is one request`, {timeout: 20_000},
         async () => {
           const r = await one_call(kind, 'exhausted', {maxRetries: 0});
           assert.equal(r.error?.status, 502);
           assert.equal(r.tries.length, 1);
           assert.equal(r.upstream.length, 3);
           assert.ok(r.waited_ms < 10_000 + margin_ms, `waited ${r.waited_ms} ms`);
         });

    test(`${kind}, maxRetries 0: an upstream timeout is one request`, {timeout: 20_000},
         async () => {
           const r = await one_call(kind, 'slow-attempts', {maxRetries: 0},
                                    {'x-request-deadline-ms': '2000'});
           assert.equal(r.error?.status, 504);
           assert.equal(r.tries.length, 1);
           assert.ok(r.waited_ms < 2000 + margin_ms, `waited ${r.waited_ms} ms`);
         });
  }
});
