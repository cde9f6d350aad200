#!/usr/bin/env bash
# Installs what is missing, builds, checks formatting and runs every test (unit, integration,
# the openai-SDK end-to-end suite). Every test has a timeout, so a hang fails fast.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/install-deps.sh" --e2e
bash "$here/scripts/format-check.sh"
bash "$here/scripts/build.sh" "$here/build" -DTETHER_REQUIRE_E2E=ON
cd "$here/build"
ctest --output-on-failure --timeout 120 -j2
