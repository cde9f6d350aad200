#!/usr/bin/env bash
# Configures once and builds incrementally (ccache underneath). Usage: build.sh [build-dir] [cmake args...]
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
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
cmake --build "$dir" -j2
