"""torch's thread count and inductor's cache dir under this container's conditions; ``MATRIX-TORCH {json}``."""

import json

import torch

out = {"threads": torch.get_num_threads()}
try:  # where inductor writes (and dlopens) its compiled kernels; torch < 2.6 raises KeyError for a UID without
    # a passwd entry here (pytorch/pytorch#140765)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    out["inductor_cache_dir"] = cache_dir()
except ImportError:
    pass
print("MATRIX-TORCH " + json.dumps(out))
