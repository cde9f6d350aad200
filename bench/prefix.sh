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
bench_name="bench prefix"
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
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

parse_quick "$@"
name_results -prefix

# ---- what it needs -------------------------------------------------------------------------
need_nginx
need_model_maker
[ -n "$engines_dir" ] || {
  log "no engine source at $engines_dir (set TETHER_ENGINES_DIR)"
  exit 1
}
engine_bin="$(build_llama_server)"
[ -x "$engine_bin" ] || { log "no llama-server: $engine_bin"; exit 1; }
make_model "$model" --n-layer 2 --n-embd 256 --n-ff 512 --n-head 4 --seed 1

build_targets tether tether-bench

# ---- processes, always cleaned up ----------------------------------------------------------
start_work tether-prefix
need_free_ports "set PREFIX_PORT_BASE" "${replica_ports[@]}" "$nginx_port" "$least_port" \
  "$prefix_port"

replica_pids=()
for k in "${!replica_ports[@]}"; do
  spawn "$work/replica-$k.log" "$engine_bin" -m "$model" --host 127.0.0.1 \
    --port "${replica_ports[$k]}" -t 1 -tb 1 -np 2 -c 8192 --no-kv-unified \
    --cache-ram "$cache_ram" --alias "replica-$k" --slots --metrics \
    --log-timestamps --log-prefix --log-colors off
  replica_pids+=("$started_pid")
done
for p in "${replica_ports[@]}"; do wait_ready "http://127.0.0.1:$p/health" 600; done

# nginx: the bench template with every replica in its upstream (round robin, nginx's default).
# No kept-alive upstream connections: llama-server closes one after a streamed answer, and nginx
# reusing it answers 502 and takes the replica out of the rotation (max_fails=0 keeps it in).
servers=""
for p in "${replica_ports[@]}"; do servers="$servers    server 127.0.0.1:$p max_fails=0;\n"; done
nginx_conf "$work" "$nginx_port" -e '/^    keepalive 512;$/d' \
  -e "s|^    server 127.0.0.1:@MOCK_PORT@;|${servers%\\n}|"
start_nginx "$work"
nginx_pid=$started_pid
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
spawn "$work/tether-least_work.log" "$build/actors/tether" --config "$work/least_work.toml"
least_pid=$started_pid
wait_ready "http://127.0.0.1:$least_port/healthz"
targets+=(--target "least_work=127.0.0.1:$least_port@$least_pid")

prefix_lines="routing = \"$arm_routing\""
[ "$arm_routing" = prefix ] && prefix_lines="$prefix_lines
prefix_load_factor = $load_factor
prefix_bytes = $prefix_bytes"
tether_config "$prefix_port" "$prefix_lines" >"$work/prefix.toml"
if "$build/actors/tether" check --config "$work/prefix.toml" >"$work/prefix-check.log" 2>&1; then
  spawn "$work/tether-prefix.log" "$build/actors/tether" --config "$work/prefix.toml"
  prefix_pid=$started_pid
  wait_ready "http://127.0.0.1:$prefix_port/healthz"
  targets+=(--target "prefix=127.0.0.1:$prefix_port@$prefix_pid")
else
  log "this tether refuses routing = \"$arm_routing\" (no prefix routing in this build): no prefix target"
  sed 's/^/  /' "$work/prefix-check.log" | head -5 >&2
fi
targets+=(--target "nginx=127.0.0.1:$nginx_port@$nginx_pid")

rev="$(source_rev)"
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
check_alive "a process" "${replica_pids[@]}" "$nginx_pid" "$least_pid" ${prefix_pid:+"$prefix_pid"}
log "results: $out_dir/$stamp.md (load $(($(date +%s) - started)) s; exit $status: 0 all targets met, 3 some missed)"
exit "$status"
