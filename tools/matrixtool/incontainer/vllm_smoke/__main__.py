"""``python3 -m vllm_smoke run CHECK1,CHECK2 PARAMS_JSON`` (the zipapp's own ``__main__`` calls the same)."""

import sys

from .runner import entry

sys.exit(entry())
