#!/usr/bin/env bash
# The real engine of the engine tests (tests/integration/engine_test.cpp): builds llama.cpp's
# llama-server once into a cache outside the clone, makes the test model into MODEL_DIR, and
# prints what the tests read from their environment, as shell assignments to eval:
#   TETHER_LLAMA_SERVER=/…/build/bin/llama-server
#   TETHER_ENGINE_MODEL=MODEL_DIR/model.gguf
#   TETHER_ENGINE_TOOL_MODEL=MODEL_DIR/tools.gguf
# Usage: engine.sh MODEL_DIR   (progress goes to stderr; stdout is only those three lines)
#
# What it needs:
# - the engines folder: llama.cpp's source snapshot with build-llama-server.sh and make_model.py
#   beside it. $TETHER_ENGINES_DIR when set, else ../shared/engines next to the repository, else
#   /work/shared/engines. Nothing is downloaded: no registry this project reaches ships
#   llama.cpp for Debian 12.
# - cmake and g++ (scripts/install-deps.sh), Debian's python3-numpy and python3-yaml
#   (install-deps.sh --engine).
# - the cache: ${TETHER_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether/engines}/llama. A
#   cold build takes about 6 minutes on 2 cores; afterwards this script takes a few seconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model_dir="${1:?usage: engine.sh MODEL_DIR}"

engines=""
for candidate in "${TETHER_ENGINES_DIR:-}" "$here/../shared/engines" /work/shared/engines; do
  if [ -n "$candidate" ] && [ -f "$candidate/build-llama-server.sh" ]; then
    engines="$(cd "$candidate" && pwd)"
    break
  fi
done
if [ -z "$engines" ]; then
  echo "engine.sh: no engines folder (build-llama-server.sh): set TETHER_ENGINES_DIR, or put it" \
    "at $here/../shared/engines" >&2
  exit 1
fi

cache="${TETHER_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether/engines}/llama"
if [ ! -x "$cache/build/bin/llama-server" ]; then
  echo "engine.sh: building llama-server into $cache (about 6 minutes cold)" >&2
fi
server="$(bash "$engines/build-llama-server.sh" "$cache" | tail -1)"
[ -x "$server" ] || { echo "engine.sh: no llama-server after the build ($server)" >&2; exit 1; }

# 8 layers of 1024: about 8 ms per decode step with one thread, so a test's request of a few
# hundred tokens lasts a few seconds and an abandoned one that runs to its max_tokens ends
# within a test's time limit; the bounds are in the engine's own decode steps, so a faster or
# slower machine changes the figures, not the verdicts. Made in a few seconds, and again only
# when its recipe changes.
recipe="--n-layer 8 --n-embd 1024 --seed 1"
model="$model_dir/model.gguf"
mkdir -p "$model_dir"
if [ ! -s "$model" ] || [ "$(cat "$model.recipe" 2>/dev/null)" != "$recipe" ]; then
  echo "engine.sh: making the test model ($recipe)" >&2
  rm -f "$model" "$model.recipe"
  # shellcheck disable=SC2086 # the recipe is a list of arguments
  PYTHONPATH="$cache/src/gguf-py" /usr/bin/python3 "$engines/make_model.py" "$model.tmp" $recipe >&2
  mv "$model.tmp" "$model"
  printf '%s' "$recipe" >"$model.recipe"
fi
model="$(cd "$model_dir" && pwd)/model.gguf"

# The same model rewritten to start every answer with "{" (scripts/tool_model.py): the tool-call
# cases of a surface whose requests cannot carry logit_bias. Made again with the model.
tools="$model_dir/tools.gguf"
if [ ! -s "$tools" ] || [ "$tools" -ot "$model" ] || [ "$tools" -ot "$here/scripts/tool_model.py" ]; then
  echo "engine.sh: making the tool-calling test model" >&2
  PYTHONPATH="$cache/src/gguf-py" /usr/bin/python3 "$here/scripts/tool_model.py" "$model" "$tools.tmp" >&2
  mv "$tools.tmp" "$tools"
fi
tools="$(cd "$model_dir" && pwd)/tools.gguf"

printf 'TETHER_LLAMA_SERVER=%q\nTETHER_ENGINE_MODEL=%q\nTETHER_ENGINE_TOOL_MODEL=%q\n' "$server" \
  "$model" "$tools"
