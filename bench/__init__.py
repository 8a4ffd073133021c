"""Benchmarks that print figures (never timed assertions): ``python -m bench.<name>``."""
