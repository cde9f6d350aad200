#!/usr/bin/env bash
# The benchmark: tether against nginx and against the direct path, on this machine.
#
#   bash bench/run.sh            full run (≈ 8 min), writes bench/results/<date>.{md,json,svg}
#   bash bench/run.sh --quick    short run (≈ 70 s) for iterating, written under /tmp
#   extra arguments go to tether-bench (e.g. --scenarios 1,3)
#
# It installs nginx if missing, builds tether, tether-mock and tether-bench, starts the mock,
# nginx (bench/nginx.conf.template) and tether on 127.0.0.1, runs every scenario against the
# three targets interleaved, and stops everything it started, whatever happens. Scenario 7 also
# starts a budget host and a member node (issue #7) and compares the member with tether.
# Scenario 8 starts three nodes serving one model on three deployments (issue #29): all live, one
# dead (a port nothing listens on) with ejection off, and one dead with ejection on.
# Scenario 9 starts two nodes in front of the mock's KV budget model (issue #30): one capping the
# upstream's tokens in flight at the mock's budget, one capping its requests in flight instead.
# Scenario 10 (issue #27) streams through the three main targets; the mock's pid is passed so the
# bench can tell its own load generation falling behind from a proxy's. Scenario 11 (issue #27)
# starts a second nginx (a worker per CPU) and a second tether, both unpinned.
# Scenario 12, abandon (issue #60), runs against a real engine instead of the mock and only when
# asked for: `bash bench/run.sh --scenarios 12` (or `bash bench/run.sh abandon`) hands over to
# bench/abandon.sh (≈ 4 min; results bench/results/<date>-abandon.{md,json}); with --quick, its
# short run (CI's, through tether alone; judged in the engine's tokens after each leave).
#
# Placement (2-core machine): the proxies (nginx: 1 worker; tether: 1 thread doing the io and
# the CAF jobs) share CPU 0, one at a time under load; the load generator and the mock share
# CPU 1. Both proxies thus get the same single core. Environment: BUILD_DIR (default build/),
# JOBS (2),
# MOCK_PORT/NGINX_PORT/TETHER_PORT (18100..18102), TETHER_HOST_PORT/TETHER_BUDGET_PORT/
# TETHER_MEMBER_PORT (18103..18105), TETHER_COLD_MEMBER_PORT (18106), REPLICAS_HEALTHY_PORT/
# REPLICAS_DEAD_PORT/REPLICAS_EJECTING_PORT (18107..18109), DEAD_UPSTREAM_PORT (18110: never
# listened on), TOKENS_NODE_PORT/SLOTS_NODE_PORT (18111, 18112), SKIP_BUILD=1 (use the binaries
# as built), BENCH_LOG_DIR=dir (keep the logs), TETHER_SERVER_KEYS="key = value" (added to every
# tether node's [server] section, e.g. "sched_batch = false"), BENCH_STAMP (the results' name;
# default: today's date).
# Scenario 13, prefix (issue #63), like scenario 12: `bash bench/run.sh prefix` (or `--scenarios
# 13`) hands over to bench/prefix.sh (three llama-server replicas behind tether least_work, tether
# prefix and nginx round robin; ≈ 12 min, --quick ≈ 4; results bench/results/<date>-prefix.*).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_name="bench"
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"

# A scenario with a script of its own (NAME, or `--scenarios NUMBER`) is handed over to
# bench/NAME.sh with the other arguments.
hand_over() {
  local name="$1" number="$2" i j
  shift 2
  local args=("$@") rest=()
  for i in "${!args[@]}"; do
    if [ "${args[$i]}" = "$name" ] || { [ "${args[$i]}" = --scenarios ] && [ "${args[$((i + 1))]:-}" = "$number" ]; }; then
      for j in "${!args[@]}"; do
        if [ "$j" != "$i" ] && { [ "${args[$i]}" = "$name" ] || [ "$j" != "$((i + 1))" ]; }; then
          rest+=("${args[$j]}")
        fi
      done
      exec bash "$here/bench/$name.sh" "${rest[@]}"
    fi
  done
}
# Scenario 12 needs an engine, not the mock: its own script starts what it needs.
hand_over abandon 12 "$@"
# Scenario 13 too: bench/prefix.sh starts its replicas, nginx and tether nodes.
hand_over prefix 13 "$@"

build="${BUILD_DIR:-$here/build}"
mock_port="${MOCK_PORT:-18100}"
nginx_port="${NGINX_PORT:-18101}"
tether_port="${TETHER_PORT:-18102}"
# Scenario 7: a budget host (a full gateway publishing its budget actor) and a member node.
host_port="${TETHER_HOST_PORT:-18103}"
budget_port="${TETHER_BUDGET_PORT:-18104}"
member_port="${TETHER_MEMBER_PORT:-18105}"
cold_port="${TETHER_COLD_MEMBER_PORT:-18106}"
# Scenario 8: the three replica nodes, and the dead deployment's port (refused: keep it unused).
replicas_healthy_port="${REPLICAS_HEALTHY_PORT:-18107}"
replicas_dead_port="${REPLICAS_DEAD_PORT:-18108}"
replicas_ejecting_port="${REPLICAS_EJECTING_PORT:-18109}"
dead_upstream_port="${DEAD_UPSTREAM_PORT:-18110}"
# Scenario 9: the token-capped and the request-capped node.
tokens_node_port="${TOKENS_NODE_PORT:-18111}"
slots_node_port="${SLOTS_NODE_PORT:-18112}"
every_cpu_nginx_port="${EVERY_CPU_NGINX_PORT:-18113}"
every_cpu_tether_port="${EVERY_CPU_TETHER_PORT:-18114}"
cap=8

parse_quick "$@"
if [ "$quick" = 1 ]; then time_limit=90; else time_limit=600; fi
name_results ""

# ---- what it needs -------------------------------------------------------------------------
need_nginx
build_targets tether tether-mock tether-bench

# 10,000 streams through a proxy: 10,000 client sockets + 10,000 upstream sockets per process.
ulimit -Hn 65536 2>/dev/null || true
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
log "open files limit $(ulimit -n)"

if [ "$(nproc)" -ge 2 ]; then
  proxy_cpus=(taskset -c 0)
  load_cpus=(taskset -c 1)
  placement="Pinned with taskset: nginx (1 worker) and tether (1 thread: io and CAF worker) on CPU 0, one of them loaded at a time; tether-bench (1 thread) and tether-mock (1 thread) on CPU 1."
else
  proxy_cpus=()
  load_cpus=()
  placement="One CPU: no pinning; every process shares it."
fi

# ---- processes, always cleaned up ----------------------------------------------------------
start_work tether-bench
need_free_ports "set MOCK_PORT/NGINX_PORT/TETHER_PORT" "$mock_port" "$nginx_port" \
  "$tether_port" "$host_port" "$budget_port" "$member_port" "$cold_port" \
  "$replicas_healthy_port" "$replicas_dead_port" "$replicas_ejecting_port" \
  "$dead_upstream_port" "$tokens_node_port" "$slots_node_port" "$every_cpu_nginx_port" \
  "$every_cpu_tether_port"

spawn "$work/mock.log" "${load_cpus[@]}" "$build/bench/tether-mock" \
  --listen "127.0.0.1:$mock_port"
mock_pid=$started_pid
wait_ready "http://127.0.0.1:$mock_port/_stats"

nginx_conf "$work" "$nginx_port" -e "s|@MOCK_PORT@|$mock_port|g"
start_nginx "$work" "${proxy_cpus[@]}"
nginx_pid=$started_pid
wait_ready "http://127.0.0.1:$nginx_port/_stats"
# Scenario 11's nginx: a worker per CPU, unpinned, in a directory of its own (idle outside it).
nginx_conf "$work/every-cpu" "$every_cpu_nginx_port" -e "s|@MOCK_PORT@|$mock_port|g" \
  -e "s|^worker_processes 1;|worker_processes $(nproc);|"
start_nginx "$work/every-cpu"
every_cpu_nginx_pid=$started_pid
wait_ready "http://127.0.0.1:$every_cpu_nginx_port/_stats"

# Starts a tether node NAME listening on PORT (extra arguments go to --print-tether-config), on
# the proxies' CPU (on every CPU with UNPINNED=1), and waits until it answers; its pid is left in
# $started_pid.
start_tether() {
  local name="$1" port="$2"
  shift 2
  "$build/bench/tether-bench" --print-tether-config --listen "127.0.0.1:$port" \
    --mock "127.0.0.1:$mock_port" --cap "$cap" "$@" >"$work/$name.toml"
  if [ -n "${TETHER_SERVER_KEYS:-}" ]; then
    # Extra [server] keys for every tether node (e.g. "sched_batch = false"), to compare settings.
    printf '%s\n' "$TETHER_SERVER_KEYS" >"$work/$name.server-keys"
    sed -i "/^\[server\]/r $work/$name.server-keys" "$work/$name.toml"
  fi
  local cpus=("${proxy_cpus[@]}")
  if [ "${UNPINNED:-0}" = 1 ]; then cpus=(); fi
  spawn "$work/$name.log" "${cpus[@]}" "$build/actors/tether" --config "$work/$name.toml"
  wait_ready "http://127.0.0.1:$port/healthz"
}
start_tether tether "$tether_port"
tether_pid=$started_pid
# The shared-budget pair (scenario 7): a full gateway publishing its budget actor, and a member
# node taking every slot from it. Idle outside scenario 7.
start_tether tether-host "$host_port" --budget-listen "127.0.0.1:$budget_port"
start_tether tether-member "$member_port" --budget-host "127.0.0.1:$budget_port"
member_pid=$started_pid
start_tether tether-member-cold "$cold_port" --budget-host "127.0.0.1:$budget_port" \
  --lease-idle-ms 0
cold_pid=$started_pid
# Scenario 8's nodes (idle outside it).
dead_upstream="127.0.0.1:$dead_upstream_port"
start_tether tether-replicas-healthy "$replicas_healthy_port" --replicas healthy
replicas_healthy_pid=$started_pid
start_tether tether-replicas-dead "$replicas_dead_port" --replicas dead \
  --dead-upstream "$dead_upstream"
replicas_dead_pid=$started_pid
start_tether tether-replicas-ejecting "$replicas_ejecting_port" --replicas ejecting \
  --dead-upstream "$dead_upstream"
replicas_ejecting_pid=$started_pid
# Scenario 9's nodes (idle outside it).
start_tether tether-tokens "$tokens_node_port" --token-node tokens
tokens_node_pid=$started_pid
start_tether tether-slots "$slots_node_port" --token-node slots
slots_node_pid=$started_pid
# Scenario 11's tether: unpinned, a CAF worker per CPU (idle outside it).
UNPINNED=1 start_tether tether-every-cpu "$every_cpu_tether_port"
every_cpu_tether_pid=$started_pid

placement="$placement Source: $(source_rev); nginx $("$nginx_bin" -v 2>&1 | sed 's|.*/||')."
log "mock :$mock_port, nginx :$nginx_port (pid $nginx_pid), tether :$tether_port (pid $tether_pid)"
status=0
"${load_cpus[@]}" timeout --kill-after=10 $((time_limit + 60)) "$build/bench/tether-bench" \
  --mock "127.0.0.1:$mock_port@$mock_pid" \
  --target "direct=127.0.0.1:$mock_port" \
  --target "nginx=127.0.0.1:$nginx_port@$nginx_pid" \
  --target "tether=127.0.0.1:$tether_port@$tether_pid" \
  --cluster-member "127.0.0.1:$member_port@$member_pid" \
  --cluster-member-cold "127.0.0.1:$cold_port@$cold_pid" \
  --replicas-healthy "127.0.0.1:$replicas_healthy_port@$replicas_healthy_pid" \
  --replicas-dead "127.0.0.1:$replicas_dead_port@$replicas_dead_pid" \
  --replicas-ejecting "127.0.0.1:$replicas_ejecting_port@$replicas_ejecting_pid" \
  --tokens-node "127.0.0.1:$tokens_node_port@$tokens_node_pid" \
  --slots-node "127.0.0.1:$slots_node_port@$slots_node_pid" \
  --every-cpu-nginx "127.0.0.1:$every_cpu_nginx_port@$every_cpu_nginx_pid" \
  --every-cpu-tether "127.0.0.1:$every_cpu_tether_port@$every_cpu_tether_pid" \
  --cap "$cap" --time-limit-s "$time_limit" --placement "$placement" \
  --out-dir "$out_dir" --stamp "$stamp" "${bench_args[@]}" || status=$?

check_alive "a proxy" "$nginx_pid" "$tether_pid"
if grep -q '"level":"error"' "$work/tether.log"; then
  log "tether logged errors:"; grep '"level":"error"' "$work/tether.log" | head -5 >&2
fi
log "results: $out_dir/$stamp.md (exit $status: 0 all targets met, 3 some missed)"
exit "$status"
