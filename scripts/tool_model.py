#!/usr/bin/env python3
"""Makes the tool-calling test model from the engine tests' random model (scripts/engine.sh).

    PYTHONPATH=<llama.cpp>/gguf-py /usr/bin/python3 scripts/tool_model.py IN.gguf OUT.gguf

The random model never chooses the byte "{" that starts a tool call, and llama-server's
/v1/messages does not pass logit_bias on, so nothing in a request can make it. This copy's weights
do: every token embedding gets a large constant in dimension 0, which the residual stream carries
through the layers, so after the final norm the hidden state points mostly along it; the output
rows are zero in that dimension except the "{" byte's. "{" is then the first choice everywhere,
and a tool whose parameters are all enum values lets llama-server's grammar force the rest of the
call and its end. The vocabulary is make_model.py's: byte b is token 3 + b.
"""
import shutil
import sys

import gguf

BRACE = 3 + ord("{")
CARRIED = 100.0  # against embedding entries of about 1: the layers' outputs do not turn it
PICKED = 1.0


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    shutil.copyfile(source, target)
    reader = gguf.GGUFReader(target, "r+")
    tensors = {t.name: t for t in reader.tensors}
    embedding = tensors["token_embd.weight"].data
    output = tensors["output.weight"].data
    embedding[:, 0] = CARRIED
    output[:, 0] = 0.0
    output[BRACE, 0] = PICKED
    reader.data.flush()


if __name__ == "__main__":
    main()
