#!/usr/bin/env bash
# Fails when a C++ file of the project's own differs from .clang-format. Fix with: format-check.sh --fix
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
mapfile -t files < <(git ls-files '*.cpp' '*.hpp')
[ "${#files[@]}" -gt 0 ] || exit 0
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run -Werror "${files[@]}"
  echo "format-check: ${#files[@]} files clean"
fi
