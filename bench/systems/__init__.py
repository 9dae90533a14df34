"""One module per system under test: each starts and stops what it needs and runs the
workloads it supports, returning ``bench.common.Result`` records."""
