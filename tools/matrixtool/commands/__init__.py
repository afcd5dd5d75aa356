"""The commands of ``tools/matrix``, one module each (``commands/<name>.py``), registered in ``_registry``."""
