#!/usr/bin/env bash
# Instructions tether executes per non-streaming request, counted by callgrind: deterministic,
# unlike wall-clock timing on a shared VM (no hardware counters there, and times vary widely).
# Runs tether under callgrind twice against tether-mock — idle, then N sequential requests on one
# keep-alive connection — and prints (total(N) − total(0)) / N.
# Usage: bench/callgrind.sh [N=300]   Environment: BUILD_DIR (default build/), PORT (19601),
# MODEL (default mock: answers at once; mock-hang with DEADLINE_MS=5 counts the deadline's path:
# intake, the 504, the upstream close and the tree's teardown), KEEP_CALLGRIND=dir (keep the
# profiles for callgrind_annotate; with DHAT=1, DHAT's dhat.N.json), ACCESS_LOG=1 (write the
# access line, as the bench's tether does; by default the log level is warn and the count leaves
# the line out), CPUS (default 0:
# tether is pinned to that CPU list, as bench/run.sh pins it, so it runs one CAF worker; "all"
# leaves it unpinned: one worker per CPU, and the count takes in their hand-offs, so it comes
# out higher; figures measured before 01299c8, in git history, are unpinned ones),
# PARALLEL=P (the N requests over P keep-alive connections at once, P curls of N/P each; the count
# is then (total(N) − total(N/2)) / (N/2), so the P connections' setup cancels out), CACHE_SIM=1
# (callgrind simulates a 32 KiB L1 and a 1 MiB last level — this host's L2 per core — and the data
# misses per request are printed too: what a request keeps that is no longer in the cache when it is
# touched again, which grows with PARALLEL where the instruction count does not).
# SDK_HEADERS=1 sends the request headers the official OpenAI SDK for Node sends (18 fields in all,
# against curl's 5): what a real caller's head costs.
# LEDGER=0 turns the ledger off ([ledger] enabled = false): what recording every request costs.
# PROMPT_BYTES=n pads the message to n bytes (a long prompt, as agents send): what a request's
# body costs on its way through.
# DHAT=1 runs valgrind's DHAT instead of callgrind and prints the heap allocations per request
# and their bytes, counted the same way (what a request asks of malloc; its instructions are not
# counted then).
# STREAM=1 asks for a streamed answer ("stream": true): with MODEL=mock-stream-stamped-200x20 and
# -400x20 (models of the bench's config) at N=3, the difference over 200 events is the
# instructions per relayed event.
# bench/callgrind.sh --floor [N=2000] counts the same for tether-actor-floor instead: the actor
# tree of a request with none of tether's work in it (bench/floor/actor_floor.cpp).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$here/build}"
# tether restarts itself with this allocator tunable unless one is set (actors/main.cpp); set
# here, so that the process callgrind watches is the one that serves, as tether runs it (and
# the floor runs with it too).
export GLIBC_TUNABLES="${GLIBC_TUNABLES:-glibc.malloc.tcache_count=64}"
if [ "${1:-}" = "--floor" ]; then
  command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }
  n="${2:-2000}"
  work="$(mktemp -d "${TMPDIR:-/tmp}/tether-callgrind.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  for count in 0 "$n"; do
    valgrind --tool=callgrind --callgrind-out-file="$work/floor.$count" \
      "$build/bench/tether-actor-floor" "$count" >/dev/null 2>&1
  done
  idle=$(sed -n 's/^totals: //p' "$work/floor.0")
  busy=$(sed -n 's/^totals: //p' "$work/floor.$n")
  echo "actor tree instructions per request: $(( (busy - idle) / n )) (N=$n; idle $idle, busy $busy)"
  exit 0
fi
n="${1:-300}"
port="${PORT:-19601}"
mock_port=$((port - 1))
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-callgrind.XXXXXX")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -n "${KEEP_CALLGRIND:-}" ]; then cp "$work"/callgrind.* "$work"/dhat.*.json "$KEEP_CALLGRIND"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$build/bench/tether-mock" --listen "127.0.0.1:$mock_port" >/dev/null 2>&1 &
pids+=($!)
"$build/bench/tether-bench" --print-tether-config --listen "127.0.0.1:$port" \
  --mock "127.0.0.1:$mock_port" --cap 8 >"$work/tether.toml"
if [ -z "${ACCESS_LOG:-}" ]; then sed -i 's/log_level = "info"/log_level = "warn"/' "$work/tether.toml"; fi
# LEDGER=0: the ledger off, to see what it costs.
if [ "${LEDGER:-1}" = 0 ]; then printf '\n[ledger]\nenabled = false\n' >>"$work/tether.toml"; fi
parallel="${PARALLEL:-1}"
if [ "$parallel" -gt 1 ] && [ $((n % (2 * parallel))) -ne 0 ]; then
  echo "callgrind.sh: N ($n) must be a multiple of 2 × PARALLEL ($parallel)" >&2
  exit 2
fi
sim=()
if [ -n "${CACHE_SIM:-}" ]; then sim=(--cache-sim=yes --LL=1048576,16,64); fi

stream=false
if [ "${STREAM:-0}" = 1 ]; then stream=true; fi

pin=()
if [ "${CPUS:-0}" != "all" ]; then pin=(taskset -c "${CPUS:-0}"); fi

# Prints the totals line of one tether life serving `count` requests (instructions first; with
# CACHE_SIM, then Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw).
measure() {
  local count="$1" out="$work/callgrind.$1"
  local tool=(--tool=callgrind "${sim[@]}" --callgrind-out-file="$out")
  if [ "${DHAT:-0}" = 1 ]; then
    tool=(--tool=dhat --dhat-out-file="$work/dhat.$count.json" --log-file="$work/dhat.$count.log")
  fi
  "${pin[@]}" valgrind "${tool[@]}" "$build/actors/tether" \
    --config "$work/tether.toml" >"$work/tether.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.2; done
  if [ "$count" -gt 0 ]; then
    local urls=()
    for _ in $(seq "$((count / parallel))"); do urls+=("http://127.0.0.1:$port/v1/chat/completions"); done
    local extra=()
    if [ -n "${DEADLINE_MS:-}" ]; then extra=(-H "x-request-deadline-ms: $DEADLINE_MS"); fi
    if [ "${SDK_HEADERS:-0}" = 1 ]; then
      # What the official OpenAI SDK for Node sends besides curl's own (host, user-agent, accept,
      # content-type, content-length): real callers' heads are three times the bench's.
      extra+=(-H 'user-agent: OpenAI/JS 4.104.0' -H 'accept: application/json'
        -H 'authorization: Bearer sk-proj-0123456789abcdef0123456789abcdef'
        -H 'x-stainless-lang: js' -H 'x-stainless-package-version: 4.104.0'
        -H 'x-stainless-os: Linux' -H 'x-stainless-arch: x64' -H 'x-stainless-runtime: node'
        -H 'x-stainless-runtime-version: v20.19.2' -H 'x-stainless-retry-count: 0'
        -H 'x-stainless-timeout: 600' -H 'accept-encoding: gzip, deflate' -H 'connection: keep-alive')
    fi
    local content=hello
    if [ -n "${PROMPT_BYTES:-}" ]; then content="$(head -c "$PROMPT_BYTES" /dev/zero | tr '\0' a)"; fi
    printf '%s' '{"model":"'"${MODEL:-mock}"'","stream":'"$stream"',"messages":[{"role":"user","content":"'"$content"'"}]}' \
      >"$work/body.json"
    local curls=()
    for _ in $(seq "$parallel"); do
      curl -s -H 'content-type: application/json' "${extra[@]}" --data-binary @"$work/body.json" \
        "${urls[@]}" >/dev/null &
      curls+=($!)
    done
    wait "${curls[@]}"
  fi
  kill -TERM "$pid"
  wait "$pid" || true
  if [ "${DHAT:-0}" = 1 ]; then
    # "==pid== Total:     16,246,123 bytes in 77,800 blocks": printed as "blocks bytes".
    sed -n 's/^==[0-9]*== Total: *\([0-9,]*\) bytes in \([0-9,]*\) blocks.*/\2 \1/p' \
      "$work/dhat.$count.log" | tr -d ,
  else
    sed -n 's/^totals: //p' "$out"
  fi
}

if [ "$parallel" -gt 1 ]; then
  base_count=$((n / 2))
else
  base_count=0
fi
read -r -a base <<<"$(measure "$base_count")"
read -r -a busy <<<"$(measure "$n")"
per=$((n - base_count))
if [ "${DHAT:-0}" = 1 ]; then
  echo "allocations per request: $(awk "BEGIN { printf \"%.1f\", (${busy[0]} - ${base[0]}) / $per }"), bytes: $(( (busy[1] - base[1]) / per )) (DHAT; N=$n over $parallel connection(s); baseline $base_count requests ${base[0]} allocations, busy ${busy[0]})"
  exit 0
fi
echo "instructions per request: $(( (busy[0] - base[0]) / per )) (N=$n over $parallel connection(s); baseline $base_count requests ${base[0]}, busy ${busy[0]})"
if [ -n "${CACHE_SIM:-}" ]; then
  # Totals: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
  echo "data misses per request: L1 $(( (busy[4] + busy[5] - base[4] - base[5]) / per )), 1 MiB last level $(( (busy[7] + busy[8] - base[7] - base[8]) / per )); instruction L1 misses $(( (busy[3] - base[3]) / per ))"
fi
