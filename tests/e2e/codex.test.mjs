// Codex CLI (`codex exec`, @openai/codex) through tether (issue 65): a custom model provider in a
// temporary CODEX_HOME, Responses wire API. At its DEFAULT retries Codex ignores x-should-retry
// and re-sends a failed call many times (request_max_retries, stream_max_retries), a fresh
// request each; tether's call table keeps them to one budget upstream.
import assert from 'node:assert/strict';
import {mkdir, mkdtemp, rm, writeFile} from 'node:fs/promises';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {after, before, describe, test} from 'node:test';

import {bin, client_suite, run_client} from './agent_clients.mjs';

// Everything that would leave the machine turned off: the update check, analytics, feedback,
// OpenTelemetry, and the features that fetch plugins, apps and updates from github.com and
// chatgpt.com at start-up (seen at the egress guard with them on).
function codex_config(gateway_url, provider_extra) {
  return `model_provider = "tether"
check_for_update_on_startup = false

[features]
plugins = false
remote_plugin = false
apps = false
in_app_updates = false
plugin_sharing = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[model_providers.tether]
name = "tether"
base_url = "${gateway_url}/v1"
wire_api = "responses"
env_key = "TETHER_E2E_KEY"
${provider_extra}
`;
}

let home = null;
let runs = 0;

client_suite(describe, test, before, after, assert, {
  name: 'codex',
  prefix: 'gpt',
  path: '/v1/responses',
  // Measured at its defaults against a failing provider: ~30 requests within ~95 s.
  schedule_ms: 150_000,
  defaults_tries: null,
  one_request_in_suite: true,
  one_request_settings: 'request_max_retries = 0 + stream_max_retries = 0',
  before: async () => {
    home = await mkdtemp(join(tmpdir(), 'tether-e2e-codex-'));
  },
  after: async () => {
    if (home) await rm(home, {recursive: true, force: true});
  },
  // One `codex exec` in a CODEX_HOME of its own (it keeps sessions and state there). Codex
  // streams every call; its final message is what it prints on stdout.
  launch: async (stack, env, model, {one_request}) => {
    const codex_home = join(home, `run-${++runs}`);
    await mkdir(codex_home, {recursive: true});
    await writeFile(
        join(codex_home, 'config.toml'),
        codex_config(stack.gateway_url,
                     one_request ? 'request_max_retries = 0\nstream_max_retries = 0' : ''));
    return run_client(
        'codex', bin('codex'),
        ['exec', '--skip-git-repo-check', '--model', model, '--sandbox', 'read-only', 'Say hello.'],
        {...env, CODEX_HOME: codex_home, TETHER_E2E_KEY: 'unused'}, {cwd: codex_home});
  },
  text: (handle) => handle.stdout,
});

// Codex dropped the Chat Completions wire API: a provider that still says so is refused before
// any request (the README tells Codex users to say "responses").
test('codex refuses wire_api = "chat"', {timeout: 60_000}, async () => {
  const codex_home = await mkdtemp(join(tmpdir(), 'tether-e2e-codex-chat-'));
  try {
    await writeFile(join(codex_home, 'config.toml'),
                    codex_config('http://127.0.0.1:9', '').replace('"responses"', '"chat"'));
    const handle = run_client(
        'codex', bin('codex'), ['exec', '--skip-git-repo-check', 'Say hello.'],
        {CODEX_HOME: codex_home, TETHER_E2E_KEY: 'unused', HTTPS_PROXY: 'http://127.0.0.1:9',
         HTTP_PROXY: 'http://127.0.0.1:9'},
        {cwd: codex_home});
    const exit = await handle.wait(50_000);
    assert.equal(exit.code, 1, handle.describe());
    assert.match(handle.stderr, /wire_api = "chat"` is no longer supported/);
  } finally {
    await rm(codex_home, {recursive: true, force: true});
  }
});
