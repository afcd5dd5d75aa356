"""Pin updates: the package index as an installer reads it, the proposal and its edits to ``matrix.yaml``."""
