# shellcheck shell=bash
# The plumbing bench/run.sh, bench/abandon.sh and bench/prefix.sh share, sourced by each after
# `set -euo pipefail`. The caller sets $here (the repository), $build (the build folder) and
# $bench_name (the prefix of its log lines) before calling the functions, which leave their
# results in the globals each one names ($quick, $bench_args, $out_dir, $stamp, $work, $pids,
# $nginx_bin, $started_pid, $status).
# shellcheck disable=SC2154,SC2034 # the caller sets $here, $build, $bench_name and reads the results

# Progress and failures go to stderr, so that a caller can keep stdout for results.
log() { echo "$bench_name: $*" >&2; }

# --quick picks the short run; every other argument goes to tether-bench ($bench_args).
parse_quick() {
  local arg
  quick=0
  bench_args=()
  for arg in "$@"; do
    if [ "$arg" = "--quick" ]; then quick=1; else bench_args+=("$arg"); fi
  done
  if [ "$quick" = 1 ]; then bench_args+=(--quick); fi
}

# The results' folder and name: a short run's under $TMPDIR, a full run's in bench/results named
# by BENCH_STAMP or today's date, with the scenario's SUFFIX (e.g. "-abandon") after the date.
name_results() {
  local suffix="$1"
  if [ "$quick" = 1 ]; then
    out_dir="${TMPDIR:-/tmp}/tether-bench-quick"
    stamp="$(date -u +%Y-%m-%d)$suffix-quick"
  else
    out_dir="$here/bench/results"
    # BENCH_STAMP names a second run of the day (e.g. 2026-12-06b) instead of replacing the first.
    stamp="${BENCH_STAMP:-$(date -u +%Y-%m-%d)}$suffix"
  fi
  mkdir -p "$out_dir"
}

# nginx is the baseline proxy: installed when missing; its path is left in $nginx_bin.
need_nginx() {
  if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    log "installing nginx"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
  fi
  nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
}

# The engines folder's make_model.py imports numpy and yaml: Debian's packages when missing.
need_model_maker() {
  if ! /usr/bin/python3 -c 'import numpy, yaml' 2>/dev/null; then
    log "installing python3-numpy python3-yaml (the model maker's)"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-numpy \
      python3-yaml >/dev/null
  fi
}

# Makes the random-weights model MODEL once (the rest: make_model.py's shape arguments), from the
# engines folder $engines_dir and the gguf-py of the engine cache $engine_cache.
make_model() {
  local model="$1"
  shift
  if [ ! -s "$model" ]; then
    log "making the model $model"
    mkdir -p "$(dirname "$model")"
    PYTHONPATH="$engine_cache/llama/src/gguf-py" /usr/bin/python3 "$engines_dir/make_model.py" \
      "$model.tmp" "$@" >/dev/null
    mv "$model.tmp" "$model"
  fi
}

# Prints the path of llama-server, built from $engines_dir into $engine_cache once, then reused.
build_llama_server() {
  log "llama-server (cached in $engine_cache/llama; ≈ 6 min when cold)"
  bash "$engines_dir/build-llama-server.sh" "$engine_cache/llama" | tail -1
}

# Builds the named targets in $build with ccache (configured the first time), unless SKIP_BUILD=1
# asks for the binaries as built.
build_targets() {
  export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    if [ ! -f "$build/CMakeCache.txt" ]; then
      cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    fi
    log "building (cmake --build $build -j${JOBS:-2})"
    cmake --build "$build" -j"${JOBS:-2}" --target "$@" >/dev/null
  fi
}

# A scratch folder $work (named after NAME) for the run's configs and logs, and $pids, the
# processes started into it: both cleaned up however the run ends.
start_work() {
  work="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  pids=()
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

# The EXIT trap: stops every started process (TERM, then KILL after 5 s) so that none outlives the
# run, keeps the logs when BENCH_LOG_DIR=dir is set (tether's access log says how long each
# request took by its own clock), and removes $work.
# shellcheck disable=SC2317 # called by the trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "${BENCH_LOG_DIR:-}" ]; then
    { mkdir -p "$BENCH_LOG_DIR" && cp "$work"/*.log "$BENCH_LOG_DIR"/ 2>/dev/null; } || true
  fi
  rm -rf "$work"
}

# True when nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Stops the run before it starts anything when one of the PORTs is taken (HINT: the variables
# that move them).
need_free_ports() {
  local hint="$1" p
  shift
  for p in "$@"; do
    port_free "$p" || { log "port $p is in use ($hint)"; exit 1; }
  done
}

# Waits (bounded: 100 × 0.1 s, or as many tries as given) until `curl URL` answers 200.
wait_ready() {
  for _ in $(seq "${2:-100}"); do
    curl -sf -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.1
  done
  log "not ready: $1"
  return 1
}

# Starts COMMAND (a CPU pinning such as `taskset -c 0` may lead it) in the background with its
# output in LOG, for cleanup to stop; its pid is left in $started_pid.
spawn() {
  local log_file="$1"
  shift
  "$@" >"$log_file" 2>&1 &
  started_pid=$!
  pids+=("$started_pid")
}

# Writes DIR/nginx.conf from bench/nginx.conf.template for nginx on PORT with DIR as its prefix
# (the rest: more sed arguments, e.g. the upstream's port).
nginx_conf() {
  local dir="$1" port="$2"
  shift 2
  mkdir -p "$dir/nginx-tmp"
  sed -e "s|@WORKDIR@|$dir|g" -e "s|@NGINX_PORT@|$port|g" "$@" \
    "$here/bench/nginx.conf.template" >"$dir/nginx.conf"
}

# Starts nginx on DIR/nginx.conf (the rest: a CPU pinning command, if any); pid in $started_pid.
start_nginx() {
  local dir="$1"
  shift
  spawn "$dir/nginx.out" "$@" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf"
}

# The commit under test, for the results' placement line, marked when tracked files differ from
# it. The results directory does not count: an earlier run's files there change no code under test.
source_rev() {
  local rev
  rev="$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ -n "$(git -C "$here" status --porcelain --untracked-files=no -- . ':!bench/results' 2>/dev/null)" ]; then
    rev="$rev + uncommitted changes"
  fi
  echo "$rev"
}

# After the load: a process (WHAT) that died under it spoils the figures, so the run fails
# (status=1); says which.
check_alive() {
  local what="$1" pid
  shift
  for pid in "$@"; do
    kill -0 "$pid" 2>/dev/null || { log "$what died during the run (pid $pid)"; status=1; }
  done
}
