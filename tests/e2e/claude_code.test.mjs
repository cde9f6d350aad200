// Claude Code (`claude -p`, @anthropic-ai/claude-code) through tether's Messages surface
// (issue 65), ANTHROPIC_BASE_URL pointing at the gateway, a HOME of its own. At its defaults it
// obeys x-should-retry, so a call tether gave its budget is one request.
import assert from 'node:assert/strict';
import {mkdtemp, rm} from 'node:fs/promises';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {after, before, describe, test} from 'node:test';

import {bin, client_suite, run_client} from './agent_clients.mjs';

let home = null;

// The stream-json events of a streamed run (one JSON object a line).
function events(handle) {
  return handle.stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
}

client_suite(describe, test, before, after, assert, {
  name: 'claude-code',
  prefix: 'claude',
  path: '/v1/messages',
  // CLAUDE_CODE_MAX_RETRIES defaults to 10 with exponential backoff (up to ~8 min if it did
  // retry); it obeys x-should-retry: false, so a call ends at its first answer.
  schedule_ms: 120_000,
  defaults_tries: 1,
  one_request_settings: 'CLAUDE_CODE_MAX_RETRIES=0 + CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK=1',
  before: async () => {
    home = await mkdtemp(join(tmpdir(), 'tether-e2e-claude-'));
  },
  after: async () => {
    if (home) await rm(home, {recursive: true, force: true});
  },
  launch: async (stack, env, model, {stream, one_request}) => run_client(
      'claude', bin('claude'),
      ['-p', '--model', model,
       ...(stream ? ['--output-format', 'stream-json', '--verbose', '--include-partial-messages'] : []),
       'Say hello.'],
      {
        ...env,
        HOME: home,
        CLAUDE_CONFIG_DIR: join(home, '.claude'),
        ANTHROPIC_BASE_URL: stack.gateway_url,
        ANTHROPIC_API_KEY: 'sk-ant-e2e-unused',
        // Its background model is the same tether model: no call to a name tether lacks.
        ANTHROPIC_SMALL_FAST_MODEL: model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
        // Nothing beyond the gateway: telemetry, error reports, the auto-updater and the rest
        // of its "nonessential" traffic off (without them it connects to api.anthropic.com).
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_TELEMETRY: '1',
        DISABLE_ERROR_REPORTING: '1',
        DISABLE_AUTOUPDATER: '1',
        ...(one_request ? {CLAUDE_CODE_MAX_RETRIES: '0', CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK: '1'}
                        : {}),
      }),
  text: (handle) => {
    const result = events(handle).find((e) => e.type === 'result');
    return result ? result.result : handle.stdout;
  },
  pieces: (handle) => events(handle)
      .filter((e) => e.type === 'stream_event' && e.event?.delta?.type === 'text_delta')
      .map((e) => e.event.delta.text),
});
