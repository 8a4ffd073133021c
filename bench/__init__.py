"""Standalone benchmarks. The measurements themselves run through ``wse bench`` (see README)."""
