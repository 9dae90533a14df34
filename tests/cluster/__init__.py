"""Failure tests on a real multi-node cluster (see README.md and ``cluster_harness.py``)."""
