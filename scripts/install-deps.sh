#!/usr/bin/env bash
# Installs, from Debian's archive (and npm for the SDK tests), exactly what is missing.
# Idempotent: a second run installs nothing and takes about a second.
set -euo pipefail

want_e2e=0
want_fuzz=0
want_package=0
want_tidy=0
want_bench=0
want_engine=0
for arg in "$@"; do
  case "$arg" in
    --e2e) want_e2e=1 ;;
    --fuzz) want_fuzz=1 ;;
    --package) want_package=1 ;;
    --tidy) want_tidy=1 ;;
    --bench) want_bench=1 ;;
    --engine) want_engine=1 ;;
  esac
done

# --no-install-recommends matters: libboost1.81-dev conflicts with 1.74, which recommends would pull.
packages=(
  build-essential cmake ccache pkg-config openssl ca-certificates curl
  libcaf-dev libboost1.81-dev libboost-system1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libspdlog-dev libtomlplusplus-dev libssl-dev libsqlite3-dev libgtest-dev libgmock-dev
  clang-format
)
# libFuzzer comes with clang's runtime libraries.
if [ "$want_fuzz" = 1 ]; then
  packages+=(clang libclang-rt-14-dev)
fi
if [ "$want_tidy" = 1 ]; then
  packages+=(clang-tidy)
fi
# The Debian package's and the monitoring files' checks (scripts/check-package.sh,
# scripts/check-monitoring.sh: promtool).
if [ "$want_package" = 1 ]; then
  packages+=(lintian prometheus)
fi
# bench/run.sh's baseline: the mock behind nginx, the cost a proxy in front of it adds.
if [ "$want_bench" = 1 ]; then
  packages+=(nginx-light)
fi
# The engine tests' llama-server (scripts/engine.sh builds it with cmake and g++, above) and
# the model it makes with llama.cpp's gguf-py, under Debian's /usr/bin/python3.
if [ "$want_engine" = 1 ]; then
  packages+=(python3-numpy python3-yaml)
fi
if [ "$want_e2e" = 1 ] && ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$want_e2e" = 1 ]; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  # Installed again whenever the lockfile changed since the last install (a new client, a new
  # pin), not only when node_modules is missing.
  lock="$(sha256sum "$here/tests/e2e/package-lock.json" | cut -d' ' -f1)"
  if [ "$(cat "$here/tests/e2e/node_modules/.tether-lock" 2>/dev/null)" != "$lock" ]; then
    (cd "$here/tests/e2e" && npm ci --no-audit --no-fund --loglevel=error)
    printf '%s' "$lock" >"$here/tests/e2e/node_modules/.tether-lock"
  fi
fi
