#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (-fsanitize=fuzzer,address,undefined)
# in build-fuzz/ and runs each for SECONDS (default 60), starting from its seed corpus in
# tests/fuzz/corpus/<target>. Fails if any target crashes, leaks, times out on one input or
# breaks an invariant; the input that did it is left in build-fuzz/artifacts/<target>/.
#
#   bash scripts/fuzz.sh          # CI: a minute per target
#   bash scripts/fuzz.sh 3600     # the longer run (tests/fuzz/README.md)
#
# New inputs found go to build-fuzz/corpus/<target>, never into the repository; copy the
# interesting ones (small) into tests/fuzz/corpus/<target> by hand.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TETHER_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${TETHER_FUZZ_JOBS:-2}"
targets=(model_request http_request config sse_framer upstream_response engine_metrics)

cxx="$(command -v clang++-14 || command -v clang++ || true)"
if [[ -z "$cxx" ]]; then
  echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

# Paths relative to the checkout, so a fresh clone reuses what ccache holds.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS=include_file_mtime,include_file_ctime,time_macros
cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs"

failed=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  echo "== fuzz_$t for ${seconds}s"
  # The first directory receives new inputs; the seed corpus is only read.
  if ! "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
      "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" 2>"$build/fuzz_$t.log"; then
    tail -n 60 "$build/fuzz_$t.log" >&2
    failed+=("$t")
    continue
  fi
  grep -E '^stat::number_of_executed_units|^Done ' "$build/fuzz_$t.log" || true
done

if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets ran ${seconds}s clean"
