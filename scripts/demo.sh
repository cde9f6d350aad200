#!/usr/bin/env bash
# Builds tether and tether-mock (nothing else) and starts tether on config/demo.toml in front of
# a tether-mock.
# Then, from another terminal:
#   curl -s localhost:8080/v1/chat/completions -H 'content-type: application/json' \
#        -d '{"model":"demo","messages":[{"role":"user","content":"hi"}]}'
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/install-deps.sh"
TETHER_TARGETS="tether tether-mock" bash "$here/scripts/build.sh" "$here/build"
"$here/build/bench/tether-mock" --listen 127.0.0.1:9100 &
mock_pid=$!
trap 'kill "$mock_pid" 2>/dev/null || true' EXIT
echo "demo: tether-mock on 127.0.0.1:9100, tether on 127.0.0.1:8080 (Ctrl-C stops both)"
"$here/build/actors/tether" --config "$here/config/demo.toml"
