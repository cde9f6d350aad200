// One run of an OpenAI Agents SDK agent (@openai/agents) with the SDK's default OpenAI client,
// configured as a user would, through the environment (OPENAI_BASE_URL, OPENAI_API_KEY); run by
// agents.test.mjs as a child process on Node 22. Args: the model, then "stream" or "plain".
// Plain prints the final output; streamed prints one JSON line per text delta as it arrives.
import {createRequire} from 'node:module';
import {Agent, run, setDefaultOpenAIClient} from '@openai/agents';

const [model, mode] = process.argv.slice(2);
// AGENTS_E2E_MAX_RETRIES set: the README's setting, a client of the SDK's own openai (7.x)
// package with that maxRetries, made the default.
if (process.env.AGENTS_E2E_MAX_RETRIES !== undefined) {
  const OpenAI = createRequire(import.meta.resolve('@openai/agents-openai'))('openai');
  setDefaultOpenAIClient(new OpenAI({maxRetries: Number(process.env.AGENTS_E2E_MAX_RETRIES)}));
}
// Ctrl-C as an agent application handles it: the run aborted (the SDK closes its connection),
// then exit. Left to the SDK, its own SIGINT handler first shuts its trace processor down, even
// with tracing off, and keeps the connection open for that long (measured 250–500 ms).
const controller = new AbortController();
process.on('SIGINT', () => {
  controller.abort();
  process.exit(130);
});
const agent = new Agent({name: 'e2e', instructions: 'Answer briefly.', model});
if (mode === 'stream') {
  const result = await run(agent, 'Say hello.', {stream: true, signal: controller.signal});
  for await (const text of result.toTextStream()) process.stdout.write(`${JSON.stringify(text)}\n`);
  await result.completed;
} else {
  const result = await run(agent, 'Say hello.', {signal: controller.signal});
  process.stdout.write(`${result.finalOutput}\n`);
}
