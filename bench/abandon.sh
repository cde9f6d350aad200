#!/usr/bin/env bash
# Scenario 12, "abandon" (issue #60): callers against a real engine, a share of them leaving
# mid-generation or hitting a deadline, direct to the engine / through nginx / through tether in
# one interleaved run, judged from the engine's own log. bench/run.sh runs it for
# `--scenarios 12` (or `abandon`); it can also be run alone:
#
#   bash bench/abandon.sh            ≈ 4 min after the builds: bench/results/<date>-abandon.{md,json}
#                                    (the previous run's abandon files there are removed)
#   bash bench/abandon.sh --quick    ≈ 1 min, written under /tmp (scripts/test.sh runs it)
#
# Its checks are in the engine's own tokens: through tether, after each caller's leave that the
# engine was running (or launched later), the engine decodes at most 2 more tokens for that
# request (its `n_decoded = k` lines stamped after the leave, up to its `stop processing`), for
# streamed and non-streamed requests each, over at least 3 leaves of each. Exit 0: every check
# met; 3: some missed; else the run failed. The short run loads the engine through tether alone
# (direct to the engine only for its clock probe; no nginx): 40 requests from 2 callers with
# twice the shares of leavers, at most 90 s of load; about 30 s on an idle 2-core machine.
#
# The engine is llama.cpp's llama-server, built from the source snapshot in TETHER_ENGINES_DIR
# (default ../shared/engines beside the repository) into TETHER_ENGINE_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/tether/engines; ≈ 6 min cold, then reused), serving a
# random-weights model made here once (8 layers, 1024 wide: a few ms per token) with 2 slots and
# one thread, `-v --log-timestamps` into its log. nginx (bench/nginx.conf.template) and tether
# (`engine = "llamacpp"`, `max_in_flight = 2`) stand in front of it.
#
# Placement (2 cores): the engine on CPU 1; nginx, tether and tether-bench on CPU 0.
# Environment: BUILD_DIR (default build/), ABANDON_ENGINE_PORT / ABANDON_NGINX_PORT /
# ABANDON_TETHER_PORT (18115..18117), ABANDON_MODEL (the model file; made if missing),
# SKIP_BUILD=1, BENCH_LOG_DIR=dir (keep the logs, the engine's included), BENCH_STAMP,
# TETHER_LLAMA_SERVER / TETHER_ENGINE_MODEL (scripts/engine.sh's: that engine and model, with
# no engine build here; the model is the same recipe),
# ABANDON_UPSTREAM_KEYS="key = value" lines added to tether's upstream (e.g.
# 'metrics_path = "/metrics"' to compare the engine features' settings).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_name="bench abandon"
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
build="${BUILD_DIR:-$here/build}"
engine_port="${ABANDON_ENGINE_PORT:-18115}"
nginx_port="${ABANDON_NGINX_PORT:-18116}"
tether_port="${ABANDON_TETHER_PORT:-18117}"
engines_dir="${TETHER_ENGINES_DIR:-$here/../shared/engines}"
engine_cache="${TETHER_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether/engines}"
model="${ABANDON_MODEL:-${TETHER_ENGINE_MODEL:-$build/engine-models/abandon-8x1024-seed1.gguf}}"

parse_quick "$@"
if [ "$quick" = 1 ]; then time_limit=200; else time_limit=540; fi
name_results -abandon

# ---- what it needs -------------------------------------------------------------------------
# The short run has no nginx target.
if [ "$quick" = 0 ]; then need_nginx; fi
need_model_maker

[ -n "${TETHER_LLAMA_SERVER:-}" ] || [ -f "$engines_dir/build-llama-server.sh" ] || {
  log "no engine source at $engines_dir (set TETHER_ENGINES_DIR)"
  exit 1
}
if [ -n "${TETHER_LLAMA_SERVER:-}" ]; then
  engine_bin="$TETHER_LLAMA_SERVER"
else
  engine_bin="$(build_llama_server)"
fi
[ -x "$engine_bin" ] || { log "no llama-server: $engine_bin"; exit 1; }
make_model "$model" --n-layer 8 --n-embd 1024 --seed 1

build_targets tether tether-bench

if [ "$(nproc)" -ge 2 ]; then
  engine_cpus=(taskset -c 1)
  proxy_cpus=(taskset -c 0)
  placement="Pinned with taskset: llama-server (-t 1) on CPU 1; nginx (1 worker), tether and tether-bench on CPU 0."
else
  engine_cpus=()
  proxy_cpus=()
  placement="One CPU: no pinning; every process shares it."
fi

# ---- processes, always cleaned up ----------------------------------------------------------
start_work tether-abandon
need_free_ports "set ABANDON_*_PORT" "$engine_port" "$nginx_port" "$tether_port"

engine_log="$work/engine.log"
spawn "$engine_log" "${engine_cpus[@]}" "$engine_bin" -m "$model" --host 127.0.0.1 \
  --port "$engine_port" -t 1 -tb 1 -np 2 -c 4096 --no-kv-unified --slots --metrics -v \
  --log-timestamps --log-prefix --log-colors off
engine_pid=$started_pid
wait_ready "http://127.0.0.1:$engine_port/health" 600

targets=(--target "direct=127.0.0.1:$engine_port@$engine_pid")
if [ "$quick" = 0 ]; then
  nginx_conf "$work" "$nginx_port" -e "s|@MOCK_PORT@|$engine_port|g"
  start_nginx "$work" "${proxy_cpus[@]}"
  nginx_pid=$started_pid
  wait_ready "http://127.0.0.1:$nginx_port/health"
  targets+=(--target "nginx=127.0.0.1:$nginx_port@$nginx_pid")
fi

# One model on the engine's 2 slots: tether admits 2 requests at a time to it.
cat >"$work/tether.toml" <<EOF
[server]
listen = "127.0.0.1:$tether_port"

[[upstreams]]
name = "engine"
base_url = "http://127.0.0.1:$engine_port"
engine = "llamacpp"
max_in_flight = 2
${ABANDON_UPSTREAM_KEYS:-}

[[models]]
name = "abandon"
upstream = "engine"

[telemetry]
log_format = "json"
log_level = "info"
EOF
spawn "$work/tether.log" "${proxy_cpus[@]}" "$build/actors/tether" --config "$work/tether.toml"
tether_pid=$started_pid
wait_ready "http://127.0.0.1:$tether_port/healthz"

rev="$(source_rev)"
nginx_version="none (short run)"
[ "$quick" = 1 ] || nginx_version="$("$nginx_bin" -v 2>&1 | sed 's|.*/||')"
placement="$placement Source: $rev; nginx $nginx_version; llama-server from $(cat "$(dirname "$engine_bin")/../../.snapshot" 2>/dev/null || echo "an unknown snapshot")."
if [ "$quick" = 0 ]; then
  # Only the latest run's abandon files are kept.
  rm -f "$out_dir"/*-abandon.json "$out_dir"/*-abandon.md "$out_dir"/*-abandon.svg
fi
log "engine :$engine_port (pid $engine_pid), nginx :$nginx_port, tether :$tether_port"
status=0
started=$(date +%s)
"${proxy_cpus[@]}" timeout --kill-after=10 $((time_limit + 60)) "$build/bench/tether-bench" --scenarios 12 \
  --engine-log "$engine_log" \
  "${targets[@]}" --target "tether=127.0.0.1:$tether_port@$tether_pid" \
  --time-limit-s "$time_limit" --placement "$placement" \
  --out-dir "$out_dir" --stamp "$stamp" "${bench_args[@]}" || status=$?
rm -f "$out_dir/$stamp.svg"  # the latency chart is the other scenarios'
check_alive "a process" "${pids[@]}"
log "results: $out_dir/$stamp.md (load $(($(date +%s) - started)) s; exit $status: 0 all targets met, 3 some missed)"
exit "$status"
