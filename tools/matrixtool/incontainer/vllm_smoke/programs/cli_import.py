"""Import vLLM's console-script module; print ``MATRIX-CLI {json}`` with vLLM's version."""

import json

import vllm
from vllm.entrypoints.cli.main import main

print("MATRIX-CLI " + json.dumps({"version": vllm.__version__, "main": callable(main)}))
