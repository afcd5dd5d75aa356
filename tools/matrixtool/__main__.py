"""``python -m matrixtool``: the same as ``tools/matrix``."""

from matrixtool.cli import main

main(prog_name="tools/matrix")
