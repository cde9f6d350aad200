// Starts tether-mock and a tether gateway in front of it as child processes, on ports the kernel
// chose, and tears both down whatever happens. The binaries come from the environment
// (TETHER_BINARY, TETHER_MOCK_BINARY) so that ctest runs exactly what it built.
import {spawn} from 'node:child_process';
import {mkdtemp, rm, writeFile} from 'node:fs/promises';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {createInterface} from 'node:readline';

const startup_timeout_ms = 10_000;
const stop_timeout_ms = 5_000;

// A child still alive when the test process exits (a crashed hook, an uncaught error) would keep
// its port and outlive the run: the exit hook is the last line of defence.
const live_children = new Set();
process.on('exit', () => {
  for (const child of live_children) child.kill('SIGKILL');
});

function required_env(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run through ctest, or set it to the built binary`);
  }
  return value;
}

// What a child takes from the runner's environment: the basics, and the sanitizer runtimes'
// options so that a run under ASan/UBSan reports the same way in its children. Anything else
// exported where the suite runs (PROXY_REQUEST_DEADLINE, an API key, GLIBC_TUNABLES) would change
// what the gateway does; a test passes what its gateway needs as `env` (tests/support/process.cpp
// does the same for the C++ suites).
const inherited_env = ['PATH', 'HOME', 'TMPDIR', 'LANG', 'LC_ALL', 'LC_CTYPE', 'TZ',
                       'ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS', 'ASAN_SYMBOLIZER_PATH',
                       'LLVM_SYMBOLIZER_PATH'];

export function child_env(extra = {}) {
  const env = {};
  for (const name of inherited_env) {
    if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  return {...env, ...extra};
}

// A running child whose stdout lines are kept (and can be awaited) and whose stderr is kept for
// failure messages. `env` is its whole environment.
class child_process_handle {
  constructor(name, file, args, env) {
    this.name = name;
    this.lines = [];
    this.stderr = '';
    this.exit = null;  // {code, signal} once exited
    this.waiters_ = new Set();
    this.child_ = spawn(file, args, {stdio: ['ignore', 'pipe', 'pipe'], env});
    live_children.add(this.child_);
    this.exited = new Promise((resolve) => {
      this.child_.on('exit', (code, signal) => {
        live_children.delete(this.child_);
        this.exit = {code, signal};
        for (const waiter of this.waiters_) waiter.on_exit();
        resolve(this.exit);
      });
    });
    this.child_.on('error', (err) => {
      this.stderr += `spawn failed: ${err.message}\n`;
    });
    this.child_.stderr.setEncoding('utf8');
    this.child_.stderr.on('data', (text) => {
      this.stderr += text;
    });
    createInterface({input: this.child_.stdout}).on('line', (line) => {
      this.lines.push(line);
      for (const waiter of this.waiters_) waiter.on_line(line);
    });
  }

  describe() {
    const tail = (text) => text.split('\n').slice(-20).join('\n');
    return `${this.name} (exit ${JSON.stringify(this.exit)})\n` +
        `stdout:\n${tail(this.lines.join('\n'))}\nstderr:\n${tail(this.stderr)}`;
  }

  // The first line (already seen or still to come) for which `match` returns a truthy value;
  // that value is the result. Fails after timeout_ms or when the process exits first.
  wait_for_line(match, timeout_ms, what) {
    for (const line of this.lines) {
      const found = match(line);
      if (found) return Promise.resolve(found);
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        on_line: (line) => {
          const found = match(line);
          if (found) finish(() => resolve(found));
        },
        on_exit: () => finish(
            () => reject(new Error(`${this.name} exited before ${what}\n${this.describe()}`))),
      };
      const timer = setTimeout(
          () => finish(
              () => reject(new Error(`no ${what} within ${timeout_ms} ms\n${this.describe()}`))),
          timeout_ms);
      const finish = (settle) => {
        clearTimeout(timer);
        this.waiters_.delete(waiter);
        settle();
      };
      this.waiters_.add(waiter);
      if (this.exit) waiter.on_exit();
    });
  }

  // SIGTERM first (tether drains and exits at once when idle), SIGKILL if that is not enough.
  async stop() {
    if (this.exit) return this.exit;
    this.child_.kill('SIGTERM');
    let timer;
    const timed_out = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), stop_timeout_ms);
    });
    const result = await Promise.race([this.exited, timed_out]);
    clearTimeout(timer);
    if (result) return result;
    this.child_.kill('SIGKILL');
    return this.exited;
  }
}

function listening_port(pattern) {
  return (line) => {
    const m = pattern.exec(line);
    return m ? Number(m[1]) : null;
  };
}

export async function start_mock() {
  const mock = new child_process_handle(
      'tether-mock', required_env('TETHER_MOCK_BINARY'), ['--listen', '127.0.0.1:0'],
      child_env());
  try {
    mock.port = await mock.wait_for_line(
        listening_port(/^tether-mock listening on 127\.0\.0\.1:(\d+)/), startup_timeout_ms,
        'the mock\'s "listening" line');
  } catch (err) {
    await mock.stop();
    throw err;
  }
  mock.url = `http://127.0.0.1:${mock.port}`;
  return mock;
}

// The models every test file may use; `mock-*` names select the mock's behaviour.
export function gateway_config(mock_port) {
  return `[server]
listen = "127.0.0.1:0"

[request]
deadline_ms = 10000
attempt_timeout_ms = 5000
max_retries = 1
retry_backoff_ms = 10

[[upstreams]]
name = "mock"
base_url = "http://127.0.0.1:${mock_port}"
max_in_flight = 16

[[models]]
name = "gpt-test"
upstream = "mock"
upstream_model = "mock"

[[models]]
name = "short-stream"
upstream = "mock"
upstream_model = "mock-stream-5x100"

[[models]]
name = "slow-stream"
upstream = "mock"
upstream_model = "mock-stream-50x100"

[[models]]
name = "slow"
upstream = "mock"
upstream_model = "mock-delay-5000"

[[models]]
name = "rejecting"
upstream = "mock"
upstream_model = "mock-fail-400"

[telemetry]
log_format = "json"
`;
}

// tether's JSON log lines of type "access" (one per model request, written at its end).
function access_entry(line) {
  try {
    const entry = JSON.parse(line);
    return entry && entry.type === 'access' ? entry : null;
  } catch {
    return null;
  }
}

// The mock, then tether pointed at it. Resolves to a stack with `stop()`, which the caller must
// run (an `after` hook); if starting fails half-way, what did start is stopped here. `config`
// makes the gateway's TOML from the mock's port (gateway_config by default); `env` is what the
// gateway gets beside child_env()'s basics (an upstream key its config names, say).
export async function start_stack(config = gateway_config, env = {}) {
  const mock = await start_mock();
  let dir = null;
  let gateway = null;
  const stop = async () => {
    await Promise.all([gateway?.stop(), mock.stop()]);
    if (dir) await rm(dir, {recursive: true, force: true});
  };
  try {
    dir = await mkdtemp(join(tmpdir(), 'tether-e2e-'));
    const config_path = join(dir, 'tether.toml');
    await writeFile(config_path, config(mock.port));
    gateway = new child_process_handle(
        'tether', required_env('TETHER_BINARY'), ['--config', config_path], child_env(env));
    gateway.port = await gateway.wait_for_line(
        listening_port(/listening on 127\.0\.0\.1:(\d+)/), startup_timeout_ms,
        'tether\'s "listening on" line');
  } catch (err) {
    await stop();
    throw err;
  }
  const gateway_url = `http://127.0.0.1:${gateway.port}`;
  return {
    mock,
    gateway,
    gateway_url,
    base_url: `${gateway_url}/v1`,
    stop,
    access_log: () => gateway.lines.map(access_entry).filter(Boolean),
    // The access line of the request with this id, awaited: it is written when the request
    // ends, which for a cancelled request is after the caller has already moved on.
    wait_for_access: (request_id, timeout_ms = 5_000) => gateway.wait_for_line(
        (line) => {
          const entry = access_entry(line);
          return entry && entry.request_id === request_id ? entry : null;
        },
        timeout_ms, `access log line for ${request_id}`),
    // Resolves to the access lines of the `n` requests that carried this X-Request-Id, awaited
    // (the last try's line may follow its response). An SDK resends a call's headers on each of
    // its retries, so these are one call's tries.
    wait_for_tries: async (request_id, n, timeout_ms = 5_000) => {
      let seen = 0;
      await gateway.wait_for_line((line) => {
        const entry = access_entry(line);
        if (entry && entry.request_id === request_id) ++seen;
        return seen >= n;
      }, timeout_ms, `${n} access log lines for ${request_id}`);
      return gateway.lines.map(access_entry)
          .filter((entry) => entry && entry.request_id === request_id);
    },
    // The mock's view of upstream traffic (GET /_stats).
    mock_stats: async () => {
      const response = await fetch(`${mock.url}/_stats`, {signal: AbortSignal.timeout(2_000)});
      if (!response.ok) throw new Error(`GET /_stats: ${response.status}`);
      return response.json();
    },
  };
}

// The mock's log entries for the requests tether forwarded with this X-Request-Id.
export function upstream_requests(stats, request_id) {
  return stats.log.filter((entry) => entry.headers['x-request-id'] === request_id);
}

// The mock's record of this request once it has arrived there (the upstream is then working on
// it and the gateway waiting for its answer), polled: the arrival is an event in another process.
export async function wait_for_upstream_request(stack, request_id, bound_ms = 5_000) {
  const give_up = Date.now() + bound_ms;
  for (;;) {
    const seen = upstream_requests(await stack.mock_stats(), request_id);
    if (seen.length > 0) return seen[0];
    if (Date.now() > give_up) {
      throw new Error(`${request_id} had not reached the upstream ${bound_ms} ms on`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// The mock's record of this request once the gateway closed its connection, polled (the close is
// an event in another process) until a bound well past any promise; the caller checks when.
export async function wait_for_upstream_close(stack, request_id, bound_ms = 3_000) {
  const give_up = Date.now() + bound_ms;
  let seen = [];
  while (Date.now() < give_up) {
    seen = upstream_requests(await stack.mock_stats(), request_id);
    const closed = seen.find((entry) => entry.outcome === 'closed_by_client');
    if (closed) return closed;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`the upstream connection of ${request_id} was still open ${bound_ms} ms on: ` +
                  JSON.stringify(seen));
}

// The upstreams and models of the one-call-one-budget tests (issue 25): tether retries twice on
// its own; `tiny` has one slot and no queue, so a second request while it is held is refused
// with 503 overloaded.
export function one_call_config(mock_port) {
  return `[server]
listen = "127.0.0.1:0"

[request]
deadline_ms = 10000
attempt_timeout_ms = 5000
max_retries = 2
retry_backoff_ms = 10

[budget]
queue_max = 0

[[upstreams]]
name = "mock"
base_url = "http://127.0.0.1:${mock_port}"
max_in_flight = 16

[[upstreams]]
name = "tiny"
base_url = "http://127.0.0.1:${mock_port}"
max_in_flight = 1

[[models]]
name = "ok"
upstream = "mock"
upstream_model = "mock"

[[models]]
name = "hang"
upstream = "mock"
upstream_model = "mock-hang"

[[models]]
name = "exhausted"
upstream = "mock"
upstream_model = "mock-fail-503"

[[models]]
name = "slow-attempts"
upstream = "mock"
upstream_model = "mock-hang"
attempt_timeout_ms = 200
max_retries = 1

[[models]]
name = "limited"
upstream = "mock"
upstream_model = "mock-ratelimit-30"

[[models]]
name = "tiny-hold"
upstream = "tiny"
upstream_model = "mock-hang"

[[models]]
name = "tiny"
upstream = "tiny"
upstream_model = "mock"

[telemetry]
log_format = "json"
`;
}

// Slack for "within the deadline": the caller's own overhead and a loaded machine, more under
// the sanitizers (ctest sets TETHER_SANITIZED there).
export const margin_ms = process.env.TETHER_SANITIZED === '1' ? 2_000 : 500;

// Holds the `tiny` upstream's only slot until release() (which aborts the holding request), so
// that the next request to it is refused with 503 overloaded.
export async function hold_tiny_slot(stack, request_id) {
  const controller = new AbortController();
  const held = fetch(`${stack.base_url}/chat/completions`, {
    method: 'POST',
    headers: {'content-type': 'application/json', 'x-request-id': request_id},
    body: JSON.stringify({model: 'tiny-hold', messages: [{role: 'user', content: 'hold'}]}),
    signal: controller.signal,
  }).catch(() => null);
  // Held once the upstream has the request.
  try {
    await wait_for_upstream_request(stack, request_id);
  } catch (err) {
    controller.abort();
    throw err;
  }
  return {
    release: async () => {
      controller.abort();
      await held;
      await stack.wait_for_access(request_id);
    },
  };
}

// A fetch for an SDK's `fetch` option that counts the HTTP requests the SDK sends, by their
// X-Request-Id: what one call cost at tether's door, seen from the caller's side.
export function counting_fetch() {
  const sent = new Map();
  const header_of = (init) => {
    const headers = new Headers(init?.headers);
    return headers.get('x-request-id');
  };
  return {
    fetch: (input, init) => {
      const id = header_of(init) ?? (input instanceof Request ? input.headers.get('x-request-id') : null);
      sent.set(id, (sent.get(id) ?? 0) + 1);
      return fetch(input, init);
    },
    sent: (request_id) => sent.get(request_id) ?? 0,
  };
}
