"""One module per command (``Args``, ``run``, ``command``); cli.py registers each."""
