"""Print torch's version and build (``torch.version.cuda`` / ``.hip``) as ``MATRIX-TORCH {json}``."""

import json

import torch

print(
    "MATRIX-TORCH "
    + json.dumps({"version": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)})
)
