"""Building images: render, base images and pins, plans, the BuildKit executor, bake, preflight, cache."""
