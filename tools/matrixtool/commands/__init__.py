"""One module per command: ``Args``, ``run`` (a report value) and ``command`` (the click command)."""
