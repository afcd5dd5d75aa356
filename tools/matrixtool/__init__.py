"""Build and smoke-test vLLM inference images from one ``matrix.yaml``.

The path of data: ``matrix.yaml → matrix.Matrix → select → render → plan → build → smoke → report``;
each arrow lives in the module of that name.
"""

__version__ = "0.1.0"
