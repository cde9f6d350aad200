// One call, one budget (issue 65) with the Anthropic providers of LangChain JS
// (@langchain/anthropic's ChatAnthropic) and the Vercel AI SDK (@ai-sdk/anthropic) against
// tether's Messages surface. Both retry by status and ignore x-should-retry, and send no session
// tether could tie their tries by. With the README's setting (maxRetries: 0) one call is one
// request; at their defaults the tries are recorded (printed): LangChain's run to their end takes
// minutes, so only with TETHER_E2E_MEASURE=1.
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import {createAnthropic} from '@ai-sdk/anthropic';
import {ChatAnthropic} from '@langchain/anthropic';
import {generateText} from 'ai';

import {agents_config, deadline_ms, figures, mark, upstream_window_ms} from './agent_clients.mjs';
import {margin_ms, start_stack} from './harness.mjs';

const measure = process.env.TETHER_E2E_MEASURE === '1';

// Besides agents_config's models, the two failing ones again with `call_identity = "body"`: these
// clients send no session, so only the body (and the peer) can tell tether a retry from a new
// call.
function providers_config(mock_port) {
  return agents_config(mock_port).replace('[telemetry]', `${['deadline', 'exhausted'].map((kind) => `[[models]]
name = "claude-body-${kind}"
upstream = "claude"
upstream_model = "${kind === 'deadline' ? 'mock-hang' : 'mock-fail-503'}"
deadline_ms = ${deadline_ms}
call_identity = "body"
`).join('\n')}
[telemetry]`);
}

describe('Anthropic providers of LangChain and the AI SDK through tether', {timeout: 900_000}, () => {
  let stack;

  before(async () => {
    stack = await start_stack(providers_config);
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  const clients = {
    langchain: (model, settings) => new ChatAnthropic({
                                      model,
                                      apiKey: 'sk-ant-unused',
                                      anthropicApiUrl: stack.gateway_url,
                                      ...settings,
                                    }).invoke('Say hello.'),
    'ai-sdk': (model, settings) => generateText({
      model: createAnthropic({baseURL: `${stack.base_url}`, apiKey: 'sk-ant-unused'})(model),
      prompt: 'Say hello.',
      ...settings,
    }),
  };

  for (const [name, call] of Object.entries(clients)) {
    test(`${name}: a plain answer`, {timeout: 30_000}, async () => {
      const m = await mark(stack, ['claude-ok']);
      const answer = await call('claude-ok', {});
      const {tries, upstream} = await m.settle();
      assert.equal(tries.length, 1);
      assert.equal(upstream.length, 1);
      const text = typeof answer.content === 'string' ? answer.content : answer.text;
      assert.equal(text, `This is mock response #${upstream[0].id}.`);
    });

    for (const [settings, what] of [[{maxRetries: 0}, 'maxRetries 0'], [{}, 'defaults']]) {
      for (const kind of ['deadline', 'exhausted']) {
        const slow = what === 'defaults' && (name === 'langchain' || kind === 'deadline');
        test(`${name}, ${what}, ${kind}`, {timeout: 600_000, skip: slow && !measure}, async () => {
          const m = await mark(stack, [`claude-${kind}`]);
          const started = Date.now();
          await assert.rejects(call(`claude-${kind}`, settings));
          const exit = {ms: Date.now() - started, code: 'rejected'};
          const result = await m.settle();
          figures(`${name} ${what}`, kind, result, exit);
          if (what === 'maxRetries 0') {
            assert.equal(result.tries.length, 1);
            assert.equal(result.upstream.length, kind === 'deadline' ? 1 : 3);
          }
        });
      }
    }

    // At the client's defaults, on a model whose calls are told by their body: the retries after
    // the first try's deadline are answered at once, so the upstream works for one budget. The
    // AI SDK's schedule (2 s, then 4 s) is short enough for every run; LangChain's (6 retries
    // from 1 s, doubling) with TETHER_E2E_MEASURE=1.
    for (const kind of ['deadline', 'exhausted']) {
      test(`${name}, defaults, call_identity = "body", ${kind}: one budget upstream`,
           {timeout: 600_000, skip: name === 'langchain' && !measure}, async () => {
             const m = await mark(stack, [`claude-body-${kind}`]);
             const started = Date.now();
             await assert.rejects(call(`claude-body-${kind}`, {}));
             const exit = {ms: Date.now() - started, code: 'rejected'};
             const result = await m.settle();
             figures(`${name} defaults, call_identity body`, kind, result, exit);
             const window = upstream_window_ms(result.upstream);
             assert.ok(window <= deadline_ms + margin_ms,
                       `the upstream worked ${window} ms on the call: more than one budget`);
             // One budget of attempts: the deadline's one, or max_retries + 1 for the call.
             assert.equal(result.upstream.length, kind === 'deadline' ? 1 : 3);
             assert.ok(result.tries.slice(1).every((t) => t.call_try > 1),
                       'every retry was taken for the same call');
           });
    }
  }
});
