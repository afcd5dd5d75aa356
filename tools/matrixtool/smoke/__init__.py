"""Smoke-testing images: plan, runners, executor, the serve check and its diagnosis, root causes, budget, and
the suite as one file (``bundle``)."""
