#!/usr/bin/env bash
# Configures when needed and builds incrementally (ccache underneath).
# Usage: build.sh [build-dir] [cmake args...]; TETHER_TARGETS="a b" builds only those targets.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$here/build}"
shift || true
# One ccache for every checkout of the project: paths are made relative to the checkout, so a
# fresh clone (as CI makes) reuses what an earlier build compiled.
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
# Without these, ccache refuses every compile that uses a precompiled header (all of actors/ and
# net/: "could not use precompiled header"), and the files of a fresh clone are all "too new"
# for its direct mode.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime

# What the configuration depends on beyond the sources: the options asked for, and whether the
# SDK suite's packages are installed (tests/e2e registers only then). A build directory made
# with other options, or before `npm ci`, is configured again instead of silently lacking a
# suite.
e2e_state="absent"
if [ -d "$here/tests/e2e/node_modules" ]; then
  e2e_state="$(sha256sum "$here/tests/e2e/package-lock.json" | cut -d' ' -f1)"
fi
stamp="args=$* e2e=$e2e_state"
if [ ! -f "$dir/CMakeCache.txt" ] || [ "$(cat "$dir/.tether-configured" 2>/dev/null)" != "$stamp" ]; then
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  printf '%s' "$stamp" >"$dir/.tether-configured"
fi
if [ -n "${TETHER_TARGETS:-}" ]; then
  # shellcheck disable=SC2086 # a list of target names
  cmake --build "$dir" -j2 --target ${TETHER_TARGETS}
else
  cmake --build "$dir" -j2
fi
