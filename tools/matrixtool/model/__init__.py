"""``matrix.yaml`` read, validated and held as frozen values; checks, conditions, profiles, selection."""
