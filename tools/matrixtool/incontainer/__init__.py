"""Scripts copied into an image and run there by ``smoke.py`` (stdlib only, Python >= 3.9)."""
