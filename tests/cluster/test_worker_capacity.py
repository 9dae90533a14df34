"""A worker connected to several pollers never runs more than its slots at once.

The product's rule on resources: "a run goes only to a worker that has room". In a cluster a
worker takes leases from every poller; its slots are one budget, not one per poller.
One worker with one slot, three pollers, jobs spread over all shards: the records
must never show two executions at the same time.
"""

from __future__ import annotations

import pytest

from shardcron.client.types import JobSpec
from tests.cluster.cluster_harness import (
    Checks,
    check_acknowledged_jobs,
    measure,
    read_executions,
    wait_jobs_final,
)


@pytest.mark.timeout(180)
def test_one_slot_worker_runs_one_run_at_a_time_across_pollers(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=3, workers=1, slots=1)
    checks = Checks()
    client = c.client("node1", owner="capacity")
    owners = {s.shard: s.owner for s in c.status().shards}
    assert len(set(owners.values())) == 3, f"shards not spread over 3 pollers: {owners}"
    jobs = client.create_jobs([JobSpec(name=f"c{i}", task=c.record_task(1.0)) for i in range(9)])
    runs_by_job = wait_jobs_final(client, [j.id for j in jobs], timeout=90)
    executions = read_executions(c.records)
    check_acknowledged_jobs(checks, runs_by_job, executions)
    events = sorted(
        [(e.start, 1) for e in executions] + [(e.end or e.start + 1.0, -1) for e in executions]
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    measure("peak concurrent runs on a 1-slot worker (3 pollers)", peak, "runs", "capacity")
    checks.expect(
        peak <= 1,
        f"a 1-slot worker ran {peak} runs at once: every poller leases to it as if it had "
        f"all its slots ({c.grep_logs('exceeds free slots')[:3]})",
    )
    checks.verify()
