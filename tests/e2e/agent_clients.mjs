// The agent CLIs and SDKs people point at gateways (Claude Code, Codex CLI, the OpenAI Agents
// SDK), run as child processes against a real gateway + tether-mock (issue 65). What they share:
// an egress guard every client's HTTP(S)_PROXY points at, so that a connection beyond 127.0.0.1
// fails the test instead of reaching the internet; the gateway's config; running one client to
// its end or interrupting it; and counting what one call cost at tether's door and upstream.
import {spawn} from 'node:child_process';
import {existsSync} from 'node:fs';
import net from 'node:net';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';

import {child_env, margin_ms, start_stack} from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const bin = (name) => join(here, 'node_modules', '.bin', name);
// Claude Code's package and openai 7.x (the Agents SDK's) want Node ≥ 22; the machine's node may
// be 20, so the lockfile pins npm's `node` package and the clients run on that.
export const node22 = join(here, 'node_modules', 'node', 'bin', 'node');
export const node22_available = existsSync(node22);

// A local listener standing in for any proxy: every connection a client tries beyond
// 127.0.0.1 (NO_PROXY keeps the gateway direct) lands here, is recorded (its first line:
// `CONNECT host:443` or `GET http://host/...`) and refused with 403.
export async function start_egress_guard() {
  const attempts = [];
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.once('data', (data) => {
      attempts.push(data.toString('latin1').split('\r\n')[0]);
      socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    attempts,
    env: {
      HTTP_PROXY: url, HTTPS_PROXY: url, ALL_PROXY: url,
      http_proxy: url, https_proxy: url, all_proxy: url,
      NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost',
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

// One upstream of each API kind on the mock, and for each a model per behaviour: `ok` answers
// at once, `stream` in 5 pieces, `slow-stream` in 50 pieces 100 ms apart, `deadline` never
// (tether's deadline of 2 s passes), `exhausted` 503 on every attempt (tether tries 3 times, in
// the same 2 s deadline), `cut` streams for 5 s and tether cuts it at its 2 s deadline.
export const deadline_ms = 2000;
export function agents_config(mock_port) {
  const models = (prefix, upstream) => [
    ['ok', 'mock', ''],
    ['stream', 'mock-stream-5x100', ''],
    ['slow-stream', 'mock-stream-50x100', ''],
    ['deadline', 'mock-hang', `deadline_ms = ${deadline_ms}`],
    ['exhausted', 'mock-fail-503', `deadline_ms = ${deadline_ms}`],
    ['cut', 'mock-stream-50x100', `deadline_ms = ${deadline_ms}`],
  ].map(([name, upstream_model, more]) => `[[models]]
name = "${prefix}-${name}"
upstream = "${upstream}"
upstream_model = "${upstream_model}"
${more}
`).join('\n');
  return `[server]
listen = "127.0.0.1:0"

[request]
deadline_ms = 10000
attempt_timeout_ms = 5000
max_retries = 2
retry_backoff_ms = 10

[[upstreams]]
name = "openai"
base_url = "http://127.0.0.1:${mock_port}"
max_in_flight = 64

[[upstreams]]
name = "claude"
base_url = "http://127.0.0.1:${mock_port}"
api = "anthropic"
max_in_flight = 64

${models('gpt', 'openai')}
${models('claude', 'claude')}
[telemetry]
log_format = "json"
`;
}

// A client process: its output kept, its end awaited, a signal sent when the test says so.
export function run_client(name, file, args, env, options = {}) {
  const child = spawn(file, args, {stdio: ['ignore', 'pipe', 'pipe'], env: child_env(env),
                                   cwd: options.cwd});
  const handle = {name, stdout: '', stderr: '', started: Date.now(), exit: null};
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (text) => handle.stdout += text);
  child.stderr.on('data', (text) => handle.stderr += text);
  handle.exited = new Promise((resolve) => {
    child.on('error', (err) => {
      handle.stderr += `spawn failed: ${err.message}\n`;
    });
    child.on('close', (code, signal) => {
      handle.exit = {code, signal, ms: Date.now() - handle.started};
      resolve(handle.exit);
    });
  });
  handle.kill = (signal) => child.kill(signal);
  handle.describe = () => `${name} ${JSON.stringify(handle.exit)}\nstdout:\n` +
      `${handle.stdout.slice(-3000)}\nstderr:\n${handle.stderr.slice(-3000)}`;
  // Bounded: a client still running after timeout_ms is killed and the wait fails.
  handle.wait = async (timeout_ms) => {
    let timer;
    const timed_out = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), timeout_ms);
    });
    const result = await Promise.race([handle.exited, timed_out]);
    clearTimeout(timer);
    if (result) return result;
    child.kill('SIGKILL');
    await handle.exited;
    throw new Error(`${name} still running after ${timeout_ms} ms\n${handle.describe()}`);
  };
  return handle;
}

async function gateway_in_flight(stack) {
  const response = await fetch(`${stack.gateway_url}/metrics`, {signal: AbortSignal.timeout(2_000)});
  const m = /^tether_requests_in_flight (\d+)/m.exec(await response.text());
  return m ? Number(m[1]) : 0;
}

// Marks where one call starts in the gateway's access log and the mock's log; `settle()` then
// waits until neither is still serving anything (bounded) and returns what the call cost: the
// requests the client sent to tether (access lines of these models) and the upstream attempts
// the mock saw.
export async function mark(stack, models) {
  const access_from = stack.access_log().length;
  const first_stats = await stack.mock_stats();
  const mock_from = first_stats.log.reduce((max, e) => Math.max(max, e.id), -1);
  const mine = (entry) => models.includes(entry.model);
  return {
    settle: async (bound_ms = 5_000) => {
      const give_up = Date.now() + bound_ms;
      for (;;) {
        const stats = await stack.mock_stats();
        if (stats.active === 0 && await gateway_in_flight(stack) === 0) break;
        if (Date.now() > give_up) throw new Error(`still serving ${bound_ms} ms after the client`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const tries = stack.access_log().slice(access_from).filter(mine);
      const upstream = (await stack.mock_stats()).log.filter((e) => e.id > mock_from);
      return {tries, upstream};
    },
  };
}

// The mock's record of the first request for `upstream_model` after the mark, once it has sent
// `chunks` stream chunks (polled: an event in another process).
export async function wait_for_chunks(stack, upstream_model, chunks, bound_ms = 30_000) {
  const give_up = Date.now() + bound_ms;
  for (;;) {
    const found = (await stack.mock_stats()).log.find(
        (e) => e.model === upstream_model && e.chunks_sent >= chunks && e.outcome !== 'completed');
    if (found) return found;
    if (Date.now() > give_up) {
      throw new Error(`no ${upstream_model} stream had sent ${chunks} chunks ${bound_ms} ms on`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// The mock's record of that request once its connection was closed, polled.
export async function wait_for_close(stack, id, bound_ms = 3_000) {
  const give_up = Date.now() + bound_ms;
  for (;;) {
    const entry = (await stack.mock_stats()).log.find((e) => e.id === id);
    if (entry?.outcome === 'closed_by_client') return entry;
    if (Date.now() > give_up) {
      throw new Error(`the upstream connection was still open ${bound_ms} ms on: ` +
                      JSON.stringify(entry));
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// "One budget": the upstream worked on the call, all its attempts together, from the first
// attempt's start to the last one's end, no longer than one deadline (plus slack), whatever
// number of tries the client sent.
export function upstream_window_ms(upstream) {
  if (upstream.length === 0) return 0;
  const start = Math.min(...upstream.map((e) => e.started_ms));
  const end = Math.max(...upstream.map((e) => e.closed_ms ?? e.ended_ms ?? e.started_ms));
  return end - start;
}

export function figures(client, what, result, exit) {
  const span = upstream_window_ms(result.upstream);
  console.log(`[ figures ] ${client} ${what}: ${result.tries.length} request(s) to tether, ` +
              `${result.upstream.length} upstream attempt(s) working over ${span.toFixed(0)} ms, ` +
              `client ended after ${exit.ms} ms (exit ${exit.code ?? exit.signal}); outcomes ` +
              JSON.stringify(result.tries.map((t) => t.outcome)));
}

const measure = process.env.TETHER_E2E_MEASURE === '1';
const cancel_bound_ms = process.env.TETHER_SANITIZED === '1' ? 1_000 : 100;

// The checks every agent client gets. `client.launch(stack, env, model, {stream, one_request})`
// starts one call as a child process (env: the egress guard's); `stream` asks for the answer
// streamed to the client's own output, `one_request` for the README's settings that keep one
// call to one request. `client.text(handle)` is the answer the client printed.
// `client.schedule_ms` bounds a call at the client's default retries; `client.defaults_tries`
// (null: not asserted, printed) what those defaults send to tether against a failure;
// `client.one_request_in_suite` runs the README settings' checks in every run.
// `client.defaults_todo` marks the defaults' one-budget checks as known to fail, and why.
export function client_suite(describe, test, before, after, assert, client) {
  describe(`${client.name} through tether`, {timeout: 900_000}, () => {
    let stack;
    let guard;
    const model = (kind) => `${client.prefix}-${kind}`;

    before(async () => {
      guard = await start_egress_guard();
      stack = await start_stack(agents_config);
      await client.before?.();
    }, {timeout: 20_000});

    after(async () => {
      await stack?.stop();
      await guard?.close();
      await client.after?.();
    }, {timeout: 20_000});

    const launch = (kind, options = {}) => client.launch(stack, guard.env, model(kind), options);
    const assert_no_egress = () =>
        assert.deepEqual(guard.attempts, [], `${client.name} tried to reach beyond 127.0.0.1`);

    test('a plain answer', {timeout: 120_000}, async () => {
      const m = await mark(stack, [model('ok')]);
      const handle = await launch('ok');
      const exit = await handle.wait(90_000);
      assert.equal(exit.code, 0, handle.describe());
      const {tries, upstream} = await m.settle();
      assert.equal(tries.length, 1);
      // Claude Code adds `?beta=true`, which tether forwards and logs.
      assert.equal(tries[0].path.split('?')[0], client.path);
      assert.equal(tries[0].outcome, 'ok');
      assert.equal(upstream.length, 1);
      assert.equal(client.text(handle).trim(), `This is mock response #${upstream[0].id}.`,
                   handle.describe());
      assert_no_egress();
    });

    test('a streamed answer, piece by piece', {timeout: 120_000}, async () => {
      const m = await mark(stack, [model('stream')]);
      const handle = await launch('stream', {stream: true});
      const exit = await handle.wait(90_000);
      assert.equal(exit.code, 0, handle.describe());
      const {tries, upstream} = await m.settle();
      assert.equal(tries.length, 1);
      assert.equal(tries[0].stream, true);
      assert.equal(tries[0].outcome, 'ok');
      assert.equal(upstream.length, 1);
      const id = upstream[0].id;
      const pieces = [1, 2, 3, 4, 5].map((i) => `#${id} piece ${i}/5 `).join('');
      assert.equal(client.text(handle).trim(), pieces.trim(), handle.describe());
      if (client.pieces) {
        assert.deepEqual(client.pieces(handle), [1, 2, 3, 4, 5].map((i) => `#${id} piece ${i}/5 `),
                         'the client received the answer piece by piece');
      }
      assert_no_egress();
    });

    test('Ctrl-C mid-stream closes the upstream', {timeout: 120_000}, async () => {
      const m = await mark(stack, [model('slow-stream')]);
      const handle = await launch('slow-stream', {stream: true});
      const streaming = await wait_for_chunks(stack, 'mock-stream-50x100', 3, 90_000)
                            .catch((err) => {
                              handle.kill('SIGKILL');
                              throw new Error(`${err.message}\n${handle.describe()}`);
                            });
      const signalled = Date.now();
      handle.kill('SIGINT');
      const [closed] = await Promise.all([wait_for_close(stack, streaming.id), handle.wait(30_000)]);
      const close_ms = closed.closed_ms - signalled;
      const {tries} = await m.settle();
      console.log(`[ figures ] ${client.name}: upstream closed ${close_ms.toFixed(1)} ms after ` +
                  `SIGINT; the client exited ${handle.started + handle.exit.ms - signalled} ms ` +
                  `after it (${handle.exit.code ?? handle.exit.signal}); tether's cancel latency ` +
                  `${tries[0]?.cancel_latency_ms} ms`);
      assert.ok(close_ms <= cancel_bound_ms, `upstream closed ${close_ms} ms after SIGINT`);
      assert.equal(tries.length, 1, 'Ctrl-C sends nothing more');
      assert.equal(tries[0].outcome, 'client_disconnected');
      assert_no_egress();
    });

    // At the client's defaults: whatever it re-sends, the upstream's attempts all start within
    // one deadline of the first (tether counts a retried call's deadline from its first try),
    // and the client ends within its own retry schedule.
    const whats = {
      deadline: 'a passed deadline',
      exhausted: 'an exhausted upstream',
      cut: 'a stream tether cuts at its deadline',
    };
    for (const kind of ['deadline', 'exhausted', 'cut']) {
      const what = whats[kind];
      // `client.defaults_todo`: why this client's calls still cost more (reported, not failing).
      test(`defaults, ${what}: one budget upstream`,
           {timeout: client.schedule_ms + 30_000, todo: client.defaults_todo}, async () => {
             const m = await mark(stack, [model(kind)]);
             const handle = await launch(kind, {stream: kind === 'cut'});
             const exit = await handle.wait(client.schedule_ms);
             assert.notEqual(exit.code, 0, handle.describe());
             const result = await m.settle();
             figures(`${client.name} defaults`, kind, result, exit);
             assert.ok(result.tries.length >= 1);
             if (client.defaults_tries !== null && kind !== 'cut') {
               assert.equal(result.tries.length, client.defaults_tries, 'requests to tether');
             }
             const span = upstream_window_ms(result.upstream);
             assert.ok(span <= deadline_ms + margin_ms,
                       `the upstream worked ${span} ms on the call: more than one budget`);
             // One budget of attempts too: against a passed deadline the one attempt the
             // deadline ended; against an exhausted upstream max_retries + 1 (3) for the whole
             // call, however many tries the client sent (the call table carries them).
             assert.equal(result.upstream.length, kind === 'exhausted' ? 3 : 1,
                          'upstream attempts for the whole call');
             assert_no_egress();
           });
    }

    for (const kind of ['deadline', 'exhausted', 'cut']) {
      const what = whats[kind];
      // In the suite where the defaults differ (Codex); for every client with
      // TETHER_E2E_MEASURE=1 (the README's table).
      test(`${client.one_request_settings}, ${what}: one request`,
           {timeout: 120_000, skip: !client.one_request_in_suite && !measure}, async () => {
             const m = await mark(stack, [model(kind)]);
             const handle = await launch(kind, {one_request: true, stream: kind === 'cut'});
             const exit = await handle.wait(90_000);
             assert.notEqual(exit.code, 0, handle.describe());
             const result = await m.settle();
             figures(`${client.name} ${client.one_request_settings}`, kind, result, exit);
             assert.equal(result.tries.length, 1);
             assert.equal(result.upstream.length, kind === 'exhausted' ? 3 : 1);
             assert_no_egress();
           });
    }
  });
}
