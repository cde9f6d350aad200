#!/usr/bin/env bash
# The clang-tidy checks of .clang-tidy over the project's own sources (actors/, net/, config/,
# bench/), from the compile commands of a build made by scripts/build.sh (default build/).
# Fails on any finding: the set is small so that it stays clean.
#
#   bash scripts/tidy.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
jobs="${TIDY_JOBS:-2}"
[ -f "$build/compile_commands.json" ] || {
  echo "tidy.sh: $build/compile_commands.json is missing (run scripts/build.sh first)" >&2
  exit 1
}
command -v run-clang-tidy >/dev/null || {
  echo "tidy.sh: run-clang-tidy not found (apt-get install clang-tidy)" >&2
  exit 1
}
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-tidy.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The build precompiles heavy headers with GCC; clang cannot read that PCH, and every source
# includes what it needs without it. -Wno-restrict is GCC's alone (TETHER_NO_FALSE_RESTRICT in
# CMakeLists.txt); clang would reject it as an unknown option.
python3 - "$build/compile_commands.json" "$work/compile_commands.json" <<'PY'
import json, re, sys
commands = json.load(open(sys.argv[1]))
for c in commands:
    c["command"] = re.sub(r"-include \S*cmake_pch\.hxx|-Winvalid-pch|-Wno-restrict", "",
                          c["command"])
json.dump(commands, open(sys.argv[2], "w"))
PY
started=$SECONDS
if ! run-clang-tidy -quiet -j "$jobs" -p "$work" "$root/(actors|net|config|bench)/" \
    >"$work/tidy.log" 2>&1; then
  grep -E "(warning|error):" "$work/tidy.log" | grep -v "warnings generated" | sort -u >&2 || true
  echo "tidy.sh: clang-tidy found problems (above)" >&2
  exit 1
fi
# Clean means something only if every source was checked: a filter that matched nothing (a
# compile database from another checkout, a moved directory) or part of them would pass here.
# run-clang-tidy prints each file's clang-tidy command line (clang-tidy-14 on Debian), the file
# last.
sed -n 's|^[^ ]*clang-tidy[^ ]* .* \([^ ]*\)$|\1|p' "$work/tidy.log" | sort -u >"$work/checked"
(cd "$root" && git ls-files 'actors/*.cpp' 'net/*.cpp' 'config/*.cpp' 'bench/*.cpp') |
  sed "s|^|$root/|" | sort -u >"$work/expected"
checked=$(wc -l <"$work/checked")
expected=$(wc -l <"$work/expected")
missing="$(comm -23 "$work/expected" "$work/checked")"
if [ "$checked" -eq 0 ] || [ "$checked" -lt "$expected" ] || [ -n "$missing" ]; then
  [ -z "$missing" ] || head -5 <<<"$missing" | sed 's|^|  not checked: |' >&2
  echo "tidy.sh: checked $checked files of the $expected sources in actors/, net/, config/ and bench/" >&2
  exit 1
fi
echo "tidy.sh: clean ($checked files, $((SECONDS - started)) s)"
