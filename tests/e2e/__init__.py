"""End-to-end tests: ``shardcron dev`` and workers as real processes (``harness.py``)."""
