"""Build and smoke-test vLLM inference images from one ``matrix.yaml``.

The path of data: ``matrix.yaml → model.Matrix → select → render → plan → build → smoke → report``; each
arrow lives in the module of that name, in the wing that holds it (docs/architecture.md lists them).
"""

__version__ = "0.1.0"
