"""Errors and exit codes, the Docker engine, tracked containers, bounded output, atomic writes, signals, input
the tool did not write (escaped for the terminal, checked against a declared shape)."""
