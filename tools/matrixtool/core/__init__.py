"""Errors and exit codes, the Docker engine, tracked containers, bounded output, atomic writes, signals."""
