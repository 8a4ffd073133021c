"""The host: the ``wse`` command line; MemoryX, SwarmX and training to come."""
