// The OpenAI Agents SDK (@openai/agents, on openai 7.x) through tether (issue 65): an agent run
// with the SDK's default client (Responses API), in a child process on Node 22 (agents_client.mjs)
// so that SIGINT is a user's Ctrl-C. At its defaults it obeys x-should-retry, so a call tether
// gave its budget is one request.
import assert from 'node:assert/strict';
import {join} from 'node:path';
import {after, before, describe, test} from 'node:test';

import {client_suite, node22, run_client} from './agent_clients.mjs';

const here = import.meta.dirname;
const lines = (handle) => handle.stdout.split('\n').filter((line) => line.startsWith('"'))
                              .map((line) => JSON.parse(line));

client_suite(describe, test, before, after, assert, {
  name: 'agents-sdk',
  prefix: 'gpt',
  path: '/v1/responses',
  // openai 7.x's default maxRetries = 2, 0.5–8 s backoff; it obeys x-should-retry: false.
  schedule_ms: 60_000,
  defaults_tries: 1,
  one_request_settings: 'setDefaultOpenAIClient(new OpenAI({maxRetries: 0}))',
  launch: async (stack, env, model, {stream, one_request}) => run_client(
      'agents-sdk', node22, [join(here, 'agents_client.mjs'), model, stream ? 'stream' : 'plain'],
      {
        ...env,
        // Node's fetch takes HTTP(S)_PROXY only when asked: the egress guard then sees the SDK's
        // own connections (its trace exporter posts to api.openai.com unless turned off).
        NODE_USE_ENV_PROXY: '1',
        NODE_NO_WARNINGS: '1',
        OPENAI_AGENTS_DISABLE_TRACING: '1',
        OPENAI_BASE_URL: stack.base_url,
        OPENAI_API_KEY: 'unused',
        ...(one_request ? {AGENTS_E2E_MAX_RETRIES: '0'} : {}),
      }),
  text: (handle) => (stream_or_plain(handle)),
  pieces: (handle) => lines(handle),
});

function stream_or_plain(handle) {
  const pieces = lines(handle);
  return pieces.length > 0 ? pieces.join('') : handle.stdout;
}
