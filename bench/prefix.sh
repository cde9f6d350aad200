#!/usr/bin/env bash
# Scenario 13, "prefix" (issue #63): the fleet's cache. Three llama-server replicas (prompt
# caching on) serve one model behind three targets, interleaved: tether routing by least live work
# (`least_work`), tether routing by the prompt's prefix (`prefix`) and nginx round robin
# (`nginx`). Agents with long system prompts in multi-turn conversations, and unique prompts;
# judged by time to first token, requests per minute, each replica's share and the engines' own
# account of cached prompt tokens. bench/run.sh runs it for `--scenarios 13` (or `prefix`); alone:
#
#   bash bench/prefix.sh            ≈ 12 min after the builds: bench/results/<date>-prefix.{md,json}
#                                   (the previous run's prefix files there are removed)
#   bash bench/prefix.sh --quick    ≈ 4 min, written under /tmp
#
# The engine is llama.cpp's llama-server (built as bench/abandon.sh does), serving a small
# random-weights model made here once (2 layers, 256 wide: prefill of ≈ 1,300 tokens takes ~1 s
# with one thread, a cached one a small fraction of that). Each replica: 2 slots, one thread,
# `--cache-ram` PREFIX_CACHE_RAM_MIB (default 9: the KV of a token is 2 KiB, so three of the
# workload's prompts of up to ≈ 1,500 tokens fit in host memory besides the 2 slots: the prompts
# of ⌈1.25 × 12 agents / 3 replicas⌉ = 5 agents. A replica holds its share of the fleet's
# prefixes at the bound, not all of them).
# Both tether nodes: `engine = "llamacpp"`, max_in_flight 8 per replica (requests queue inside the
# engines, as they do behind nginx); the prefix node sets `routing = "prefix"`,
# `prefix_load_factor = 1.25` and `prefix_bytes = 1024`. A tether built without prefix routing
# (its config check refuses the setting) has no prefix target: the scenario's goals are then
# reported MISSED.
#
# Placement: nothing pinned (three one-thread replicas on 2 cores: pinning would give one of them
# a core of its own).
# Environment: BUILD_DIR (default build/), PREFIX_REPLICAS (3), PREFIX_PORT_BASE (18700: replicas
# +0.., nginx +10, tether least_work +11, tether prefix +12), PREFIX_MODEL (made if missing),
# PREFIX_CACHE_RAM_MIB, PREFIX_ARM_ROUTING (default "prefix"; "least_work" makes the prefix
# target a second least_work node, which must miss the goals), SKIP_BUILD=1, BENCH_LOG_DIR=dir
# (keep the logs), BENCH_STAMP.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$here/build}"
base="${PREFIX_PORT_BASE:-18700}"
replicas="${PREFIX_REPLICAS:-3}"
replica_ports=()
for k in $(seq 0 $((replicas - 1))); do replica_ports+=($((base + k))); done
nginx_port=$((base + 10))
least_port=$((base + 11))
prefix_port=$((base + 12))
# The engines folder as scripts/engine.sh finds it.
engines_dir=""
for candidate in "${TETHER_ENGINES_DIR:-}" "$here/../shared/engines" /work/shared/engines; do
  if [ -n "$candidate" ] && [ -f "$candidate/build-llama-server.sh" ]; then
    engines_dir="$candidate"
    break
  fi
done
engine_cache="${TETHER_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether/engines}"
model="${PREFIX_MODEL:-$build/engine-models/prefix-2x256-seed1.gguf}"
cache_ram="${PREFIX_CACHE_RAM_MIB:-9}"
arm_routing="${PREFIX_ARM_ROUTING:-prefix}"
load_factor=1.25
# The test model's tokenizer takes about a character per token, so the agents' system prompts of
# ≈ 1,300 tokens are ≈ 1,550 bytes (in English ≈ 5 KB): the key is their first 1,024 bytes, as
# the default 2,048 would be for real text, not the first turns of each conversation too.
prefix_bytes=1024

quick=0
bench_args=()
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then quick=1; else bench_args+=("$arg"); fi
done
if [ "$quick" = 1 ]; then
  out_dir="${TMPDIR:-/tmp}/tether-bench-quick"
  stamp="$(date -u +%Y-%m-%d)-prefix-quick"
  bench_args+=(--quick)
else
  out_dir="$here/bench/results"
  stamp="${BENCH_STAMP:-$(date -u +%Y-%m-%d)}-prefix"
fi
mkdir -p "$out_dir"

log() { echo "bench prefix: $*" >&2; }

# ---- what it needs -------------------------------------------------------------------------
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  log "installing nginx"
  apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
if ! /usr/bin/python3 -c 'import numpy, yaml' 2>/dev/null; then
  log "installing python3-numpy python3-yaml (the model maker's)"
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-numpy \
    python3-yaml >/dev/null
fi
[ -n "$engines_dir" ] || {
  log "no engine source at $engines_dir (set TETHER_ENGINES_DIR)"
  exit 1
}
log "llama-server (cached in $engine_cache/llama; ≈ 6 min when cold)"
engine_bin="$(bash "$engines_dir/build-llama-server.sh" "$engine_cache/llama" | tail -1)"
[ -x "$engine_bin" ] || { log "no llama-server: $engine_bin"; exit 1; }
if [ ! -s "$model" ]; then
  log "making the model $model"
  mkdir -p "$(dirname "$model")"
  PYTHONPATH="$engine_cache/llama/src/gguf-py" /usr/bin/python3 "$engines_dir/make_model.py" \
    "$model.tmp" --n-layer 2 --n-embd 256 --n-ff 512 --n-head 4 --seed 1 >/dev/null
  mv "$model.tmp" "$model"
fi

export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  log "building (cmake --build $build)"
  cmake --build "$build" -j"${JOBS:-2}" --target tether tether-bench >/dev/null
fi

# ---- processes, always cleaned up ----------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-prefix.XXXXXX")"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "${BENCH_LOG_DIR:-}" ]; then mkdir -p "$BENCH_LOG_DIR" && cp "$work"/*.log "$BENCH_LOG_DIR"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "${replica_ports[@]}" "$nginx_port" "$least_port" "$prefix_port"; do
  port_free "$p" || { log "port $p is in use (set PREFIX_PORT_BASE)"; exit 1; }
done

# Waits (bounded: 100 × 0.1 s, or as many tries as given) until `curl URL` answers 200.
wait_ready() {
  for _ in $(seq "${2:-100}"); do
    curl -sf -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.1
  done
  log "not ready: $1"
  return 1
}

replica_pids=()
for k in "${!replica_ports[@]}"; do
  "$engine_bin" -m "$model" --host 127.0.0.1 --port "${replica_ports[$k]}" -t 1 \
    -tb 1 -np 2 -c 8192 --no-kv-unified --cache-ram "$cache_ram" --alias "replica-$k" \
    --slots --metrics \
    --log-timestamps --log-prefix --log-colors off >"$work/replica-$k.log" 2>&1 &
  replica_pids+=($!)
  pids+=($!)
done
for p in "${replica_ports[@]}"; do wait_ready "http://127.0.0.1:$p/health" 600; done

# nginx: the bench template with every replica in its upstream (round robin, nginx's default).
# No kept-alive upstream connections: llama-server closes one after a streamed answer, and nginx
# reusing it answers 502 and takes the replica out of the rotation (max_fails=0 keeps it in).
mkdir -p "$work/nginx-tmp"
servers=""
for p in "${replica_ports[@]}"; do servers="$servers    server 127.0.0.1:$p max_fails=0;\n"; done
sed -e "s|@WORKDIR@|$work|g" -e "s|@NGINX_PORT@|$nginx_port|g" -e '/^    keepalive 512;$/d' \
  -e "s|^    server 127.0.0.1:@MOCK_PORT@;|${servers%\\n}|" \
  "$here/bench/nginx.conf.template" >"$work/nginx.conf"
"$nginx_bin" -p "$work" -c "$work/nginx.conf" >"$work/nginx.out" 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
wait_ready "http://127.0.0.1:$nginx_port/health"

# A tether node: model "prefix" on every replica, with the given routing lines.
tether_config() {
  local port="$1" routing="$2"
  cat <<EOF
[server]
listen = "127.0.0.1:$port"

EOF
  for k in "${!replica_ports[@]}"; do
    cat <<EOF
[[upstreams]]
name = "replica-$k"
base_url = "http://127.0.0.1:${replica_ports[$k]}"
engine = "llamacpp"
max_in_flight = 8

EOF
  done
  for k in "${!replica_ports[@]}"; do
    cat <<EOF
[[models]]
name = "prefix"
upstream = "replica-$k"
$routing

EOF
  done
  cat <<EOF
[telemetry]
log_format = "json"
log_level = "info"
EOF
}
targets=()
tether_config "$least_port" "" >"$work/least_work.toml"
"$build/actors/tether" --config "$work/least_work.toml" >"$work/tether-least_work.log" 2>&1 &
least_pid=$!
pids+=("$least_pid")
wait_ready "http://127.0.0.1:$least_port/healthz"
targets+=(--target "least_work=127.0.0.1:$least_port@$least_pid")

prefix_lines="routing = \"$arm_routing\""
[ "$arm_routing" = prefix ] && prefix_lines="$prefix_lines
prefix_load_factor = $load_factor
prefix_bytes = $prefix_bytes"
tether_config "$prefix_port" "$prefix_lines" >"$work/prefix.toml"
if "$build/actors/tether" check --config "$work/prefix.toml" >"$work/prefix-check.log" 2>&1; then
  "$build/actors/tether" --config "$work/prefix.toml" >"$work/tether-prefix.log" 2>&1 &
  prefix_pid=$!
  pids+=("$prefix_pid")
  wait_ready "http://127.0.0.1:$prefix_port/healthz"
  targets+=(--target "prefix=127.0.0.1:$prefix_port@$prefix_pid")
else
  log "this tether refuses routing = \"$arm_routing\" (no prefix routing in this build): no prefix target"
  sed 's/^/  /' "$work/prefix-check.log" | head -5 >&2
fi
targets+=(--target "nginx=127.0.0.1:$nginx_port@$nginx_pid")

rev="$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$here" status --porcelain --untracked-files=no -- . ':!bench/results' 2>/dev/null)" ]; then
  rev="$rev + uncommitted changes"
fi
placement="$replicas llama-server replicas (-t 1, -np 2, --cache-ram $cache_ram), nginx (1 worker), two tether nodes and tether-bench: nothing pinned. The prefix target's routing: $arm_routing. Source: $rev; nginx $("$nginx_bin" -v 2>&1 | sed 's|.*/||'); llama-server from $(cat "$engine_cache/llama/.snapshot" 2>/dev/null || echo "an unknown snapshot")."
if [ "$quick" = 0 ]; then
  rm -f "$out_dir"/*-prefix.json "$out_dir"/*-prefix.md "$out_dir"/*-prefix.svg
fi
log "replicas :${replica_ports[0]} :${replica_ports[1]}, nginx :$nginx_port, tether least_work :$least_port, prefix :$prefix_port"
status=0
started=$(date +%s)
replica_args=()
for p in "${replica_ports[@]}"; do replica_args+=(--engine-replica "127.0.0.1:$p"); done
timeout --kill-after=10 900 "$build/bench/tether-bench" --scenarios 13 "${replica_args[@]}" \
  --prefix-load-factor "$load_factor" "${targets[@]}" --time-limit-s 840 \
  --placement "$placement" --out-dir "$out_dir" --stamp "$stamp" "${bench_args[@]}" || status=$?
rm -f "$out_dir/$stamp.svg"  # the latency chart is the mock scenarios'
for pid in "${replica_pids[@]}" "$nginx_pid" "$least_pid" ${prefix_pid:+"$prefix_pid"}; do
  kill -0 "$pid" 2>/dev/null || { log "a process died during the run (pid $pid)"; status=1; }
done
log "results: $out_dir/$stamp.md (load $(($(date +%s) - started)) s; exit $status: 0 all targets met, 3 some missed)"
exit "$status"
