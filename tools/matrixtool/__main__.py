"""``python -m matrixtool``: the same as ``tools/matrix``; ``entry`` is the installed ``matrix`` console script.

A signal during start-up (importing click, docker and the commands takes about half a second) exits 130 or 143 with one
line, never a traceback: ``interrupts.quiet_start`` runs before those imports.
"""

from matrixtool.core.interrupts import quiet_start

quiet_start()


def entry(prog_name: str | None = None) -> None:
    """Run the CLI (``cli.main``); ``prog_name`` None: the name it was started by."""
    from matrixtool.cli import main

    main(prog_name=prog_name)


if __name__ == "__main__":
    entry("tools/matrix")
