"""The in-image smoke checks as a package (stdlib only, Python >= 3.9): see runner.py and catalogue.py."""

import sys

# sys.modules["triton"] when this package was imported, before any check ran: a module planted by a .pth file or
# sitecustomize at start-up is there already (no-fake-triton tells it from one that `import vllm` plants).
TRITON_AT_START = sys.modules.get("triton")
# sys.path when this package was imported: what a check imports may add to it (`import setuptools`, which Triton
# 2.x does, appends setuptools/_vendor, whose typing_extensions 4.12.2 metadata would then shadow the real one).
SYS_PATH_AT_START = list(sys.path)
