"""SIGKILL a poller that is not the leader: its shards move, their due runs still run.

Jobs are placed in the victim's shards on purpose (the shard of a job is a hash of
its id, so the test creates cron jobs until enough land there, and one-off `at` jobs
due while the victim is dead). The shards must be served by live pollers again within
the session timeout + 2 s, and every run due in them must still run.
"""

from __future__ import annotations

import time

import pytest

from shardcron.client.types import JobSpec, Schedule
from shardcron.coordinator.ids import shard_for
from tests.cluster.cluster_harness import (
    SESSION_TIMEOUT,
    SHARDS,
    Checks,
    JobFeeder,
    check_acknowledged_jobs,
    check_cron_coverage,
    check_fire_attempts,
    check_no_overlap,
    measure,
    read_executions,
    utc,
    wait_cron_final,
    wait_jobs_final,
)


@pytest.mark.timeout(240)
def test_poller_sigkill_moves_its_shards_and_their_runs_still_run(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=3, workers=2)
    checks = Checks()
    before = c.wait_stable(workers=2)
    victim = next(n for n in sorted(c.nodes) if n != before.leader)
    survivors = [n for n in c.nodes if n != victim]
    api = before.leader  # the leader survives this test
    theirs = {s.shard for s in before.shards if s.owner == victim}
    assert len(theirs) >= SHARDS // 4, f"{victim} owns {len(theirs)} shards"
    client = c.client(api, owner="poller-kill")

    crons = []
    for i in range(40):
        job = client.create_job(
            JobSpec(
                name=f"cron{i}", task=c.record_task(0.2), schedule=Schedule.cron_expr("* * * * * *")
            )
        )
        if shard_for(job.id, SHARDS) in theirs:
            crons.append(job)
            if len(crons) == 2:
                break
        else:
            client.delete_job(job.id)
    assert crons, "no cron job landed in the victim's shards"
    cron_from = time.time()
    # one-off jobs due while the victim is dead, in its shards: created through it, as
    # one-off jobs due soon are placed on the shards of the node that takes the create
    via_victim = c.client(victim, owner="poller-kill")
    due = time.time() + 5
    ats = []
    for i in range(80):
        job = via_victim.create_job(
            JobSpec(
                name=f"at{i}",
                task=c.record_task(0.2),
                schedule=Schedule.once_at(utc(due + (i % 8) * 0.5)),
            )
        )
        if shard_for(job.id, SHARDS) in theirs:
            ats.append(job)
        else:
            client.delete_job(job.id)
        if len(ats) >= 8:
            break
    assert ats, "no at job landed in the victim's shards"
    feeder = JobFeeder(c, api, "poller-kill", interval=0.25)
    feeder.start()
    try:
        time.sleep(max(0.0, due - 2 - time.time()))
        killed_at = c.kill_node(victim)
        recovered_at = None
        while time.time() < killed_at + 30:
            st = c.status(via=survivors[int(time.time() * 10) % 2], timeout=1)
            if c.served_by_live(st, survivors):
                recovered_at = time.time()
                break
            time.sleep(0.1)
        time.sleep(4)
    finally:
        feeder.stop()
    cron_until = time.time()
    failover = (recovered_at or time.time()) - killed_at
    measure("poller failover (SIGKILL -> its shards live-owned)", failover, test="poller")
    checks.expect(
        recovered_at is not None and failover <= SESSION_TIMEOUT + 2,
        f"{victim}'s shards not served by live pollers within {SESSION_TIMEOUT + 2:g}s "
        f"(took {failover:.2f}s; status {c.status()})",
    )
    after = c.status()
    moved = {s.shard: s.owner for s in (after.shards if after else []) if s.shard in theirs}
    checks.expect(
        all(o in survivors for o in moved.values()) and len(moved) == len(theirs),
        f"the victim's shards are not all with survivors: {moved}",
    )

    one_offs = [j.id for j in ats] + feeder.job_ids
    runs_by_job = wait_jobs_final(client, one_offs, timeout=60)
    executions = read_executions(c.records)
    check_acknowledged_jobs(checks, runs_by_job, executions)
    check_fire_attempts(checks, [r for runs in runs_by_job.values() for r in runs])
    # the at jobs of the victim's shards ran after the kill, and not before they were due
    by_run = {e.run_id: e for e in executions}
    lags = []
    for job in ats:
        for r in runs_by_job[job.id]:
            if r.started_at is not None and r.id in by_run:
                lags.append(by_run[r.id].start - r.due_at.timestamp())
                checks.expect(
                    by_run[r.id].start >= r.due_at.timestamp() - 0.05,
                    f"run {r.id} started before it was due",
                )
    if lags:
        measure("at-run lag in moved shards (max)", max(lags), test="poller")
    fire_of = {r.id: (r.job_id, r.fire_key) for runs in runs_by_job.values() for r in runs}
    window = (cron_from + 1, cron_until - 1)
    outcomes = {}
    for job in crons:
        runs = wait_cron_final(client, job.id, window)
        fire_of.update({r.id: (r.job_id, r.fire_key) for r in runs})
        outcomes[job.id] = check_cron_coverage(checks, job.id, runs, window)
        check_fire_attempts(checks, runs)
        client.delete_job(job.id)
        # the fires due while the shard had no owner ran or were skipped by the misfire
        # policy, but none is silently missing (check_cron_coverage); and some ran after
        ran_after = [
            r for r in runs if r.fire_at.timestamp() > killed_at and r.state.value == "SUCCEEDED"
        ]
        checks.expect(bool(ran_after), f"cron {job.id}: nothing ran after the kill")
    check_no_overlap(checks, executions, fire_of, lambda e: e.start + c.lease_ttl)
    print(
        f"victim {victim} ({len(theirs)} shards); {len(ats)} at jobs and {len(crons)} cron jobs "
        f"in its shards; cron outcomes {outcomes}; {len(feeder.acked)} jobs acknowledged"
    )
    checks.verify()
