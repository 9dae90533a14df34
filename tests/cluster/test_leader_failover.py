"""SIGKILL the leader (a node with every role) while jobs flow.

What must hold: a new leader with a higher epoch; every one of the 64 shards has a
live owner again within the ZooKeeper session timeout + 2 s; every acknowledged job
ends SUCCEEDED with a complete execution on record; no run (and no two attempts of
one fire) executed twice at once; every nominal second of a `* * * * * *` cron job
has an outcome.
"""

from __future__ import annotations

import time

import pytest

from shardcron.client.types import JobSpec, Schedule
from tests.cluster.cluster_harness import (
    SESSION_TIMEOUT,
    Checks,
    JobFeeder,
    all_runs,
    check_acknowledged_jobs,
    check_cron_coverage,
    check_fire_attempts,
    check_no_overlap,
    measure,
    read_executions,
    wait_cron_final,
    wait_jobs_final,
)


@pytest.mark.timeout(240)
def test_leader_sigkill_while_jobs_flow(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=3, workers=2)
    checks = Checks()
    before = c.wait_stable(workers=2)
    leader, old_epoch = before.leader, before.epoch
    survivors = [n for n in c.nodes if n != leader]
    api = survivors[0]
    client = c.client(api, owner="leader-kill")
    cron = client.create_job(
        JobSpec(
            name="every-second", task=c.record_task(), schedule=Schedule.cron_expr("* * * * * *")
        )
    )
    cron_from = time.time()
    feeder = JobFeeder(c, api, "leader-kill", interval=0.2)
    feeder.start()
    try:
        time.sleep(4)
        killed_at = c.kill_node(leader)
        recovered_at = None
        after = None
        while time.time() < killed_at + 30:
            st = c.status(via=survivors[int(time.time() * 10) % 2], timeout=1)
            if (
                st is not None
                and st.leader in survivors
                and st.epoch > old_epoch
                and c.served_by_live(st, survivors)
            ):
                recovered_at, after = time.time(), st
                break
            time.sleep(0.1)
        time.sleep(4)  # jobs keep flowing on the new term
    finally:
        feeder.stop()
    cron_until = time.time()
    failover = (recovered_at or time.time()) - killed_at
    measure("leader failover (SIGKILL -> 64 shards live-owned)", failover, test="leader")
    checks.expect(
        recovered_at is not None and failover <= SESSION_TIMEOUT + 2,
        f"shards not all served by live pollers under a new leader within "
        f"{SESSION_TIMEOUT + 2:g}s of the leader's SIGKILL (took {failover:.2f}s; "
        f"last status {after or c.status()})",
    )
    if after is not None:
        checks.expect(after.leader != leader and after.epoch > old_epoch, f"epoch {after.epoch}")

    runs_by_job = wait_jobs_final(client, feeder.job_ids, timeout=60)
    cron_runs = wait_cron_final(client, cron.id, (cron_from + 1, cron_until - 1))
    client.delete_job(cron.id)
    executions = read_executions(c.records)
    checks.expect(len(feeder.acked) > 20, f"only {len(feeder.acked)} jobs acknowledged")
    check_acknowledged_jobs(checks, runs_by_job, executions)
    check_fire_attempts(checks, [r for runs in runs_by_job.values() for r in runs] + cron_runs)
    fire_of = {r.id: (r.job_id, r.fire_key) for runs in runs_by_job.values() for r in runs}
    fire_of.update({r.id: (r.job_id, r.fire_key) for r in all_runs(client, cron.id)})
    check_no_overlap(checks, executions, fire_of, lambda e: e.start + c.lease_ttl)
    outcomes = check_cron_coverage(checks, cron.id, cron_runs, (cron_from + 1, cron_until - 1))
    print(
        f"leader {leader} killed at epoch {old_epoch}; new leader {after and after.leader} "
        f"epoch {after and after.epoch}; {len(feeder.acked)} jobs acknowledged, "
        f"{len(feeder.failed)} create attempts failed, {feeder.lost_creates} given up; "
        f"cron outcomes {outcomes}"
    )
    checks.verify()
