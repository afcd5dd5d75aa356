"""Programs the checks run as child Pythons (or import): real files, linted; stdlib-only at import time."""
