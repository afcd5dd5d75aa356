"""The in-image smoke checks as a package (stdlib only, Python >= 3.9): see runner.py and catalogue.py."""
