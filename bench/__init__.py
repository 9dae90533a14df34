"""shardcron's benchmark harness: the workloads of docs/benchmarks.md, run against shardcron
and its peers side by side in one run, reported as ratios (``python -m bench``)."""
