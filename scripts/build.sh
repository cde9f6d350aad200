#!/usr/bin/env bash
# Configures once and builds incrementally (ccache underneath). Usage: build.sh [build-dir] [cmake args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$here/build}"
shift || true
# One ccache for every checkout of the project: paths are made relative to the checkout, so a
# fresh clone (as CI makes) reuses what an earlier build compiled.
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
cmake --build "$dir" -j2
