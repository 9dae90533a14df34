"""Shards move under a stream of commands: a node joins, then a node is SIGKILLed.

Issue 11, item 4: on a three-node cluster a shard move re-ran finished work — a
result that reached the old owner of a shard after the move was refused as stale
and the run executed again once its lease lapsed on the new owner; fires of a
FORBID job were recorded SKIPPED/OVERLAP with nothing running; a lost cron fire
ran again as attempt 2 after a later fire. Here two nodes serve one-off jobs
(commands of 1.5 s, longer than a heartbeat, so many are running at each move; and
of 5 s, longer than a lease, which only renewals by the shard's owner keep going) and
three cron jobs (`* * * * * *`, one FORBID with commands longer than its period);
a third node joins and takes shards from the others (a live hand-over), then a
node other than the leader is SIGKILLed (its shards move once its session
expires). Every command records its own executions. Asserted:

- no run executes twice at once, nor two attempts of one fire (``check_no_overlap``);
- no finished run executes again, and none is recorded failed after it succeeded
  (``check_runs_once``): the figure "re-executions after a shard move 0 of N";
- every acknowledged job ends SUCCEEDED once; every cron fire has one outcome;
- a FORBID fire is skipped for overlap only while a run of its job is going.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from shardcron.client.types import (
    ConcurrencyPolicy,
    JobSpec,
    OverlapPolicy,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from tests.cluster.cluster_harness import (
    Checks,
    Execution,
    JobFeeder,
    check_acknowledged_jobs,
    check_cron_coverage,
    check_fire_attempts,
    check_no_overlap,
    check_runs_once,
    measure,
    read_executions,
    wait_cron_final,
    wait_jobs_final,
)

COMMAND = 1.5  # seconds each one-off command runs: several are going at each move
LONG_COMMAND = 5.0  # longer than the lease TTL: only renewals keep it going
FORBID_COMMAND = 1.5  # longer than its job's period: every other fire overlaps


def in_flight(executions: Sequence[Execution], at: float) -> list[Execution]:
    return [e for e in executions if e.start <= at and (e.end is None or e.end >= at)]


def check_overlap_skips(
    checks: Checks, runs: Sequence[Run], executions: Sequence[Execution], slack: float
) -> int:
    """Every fire skipped for OVERLAP came due while an execution of its job was going
    (``slack``: from a lease granted to its command starting, and the clocks). Returns
    how many fires were skipped so."""
    skipped = [r for r in runs if (r.state, r.reason) == (RunState.SKIPPED, RunReason.OVERLAP)]
    job_runs = {r.id for r in runs}
    mine = [e for e in executions if e.run_id in job_runs]
    for r in skipped:
        due = r.due_at.timestamp()
        going = [
            e for e in mine if e.start - slack <= due and (e.end is None or due <= e.end + slack)
        ]
        checks.expect(
            bool(going),
            f"fire {r.fire_key} of FORBID job {r.job_id} skipped for overlap with nothing running",
        )
    return len(skipped)


@pytest.mark.timeout(240)
def test_shard_moves_cost_no_re_execution(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=2, workers=2, slots=12)
    checks = Checks()
    api = c.wait_stable(workers=2).leader
    client = c.client(api, owner="moves")
    crons = [
        client.create_job(
            JobSpec(
                name=f"cron{i}", task=c.record_task(0.2), schedule=Schedule.cron_expr("* * * * * *")
            )
        )
        for i in range(2)
    ]
    forbid = client.create_job(
        JobSpec(
            name="forbid",
            task=c.record_task(FORBID_COMMAND),
            schedule=Schedule.cron_expr("* * * * * *"),
            concurrency=ConcurrencyPolicy(overlap=OverlapPolicy.FORBID),
        )
    )
    cron_from = time.time()
    feeder = JobFeeder(c, api, "moves", interval=0.1, sleep=COMMAND)
    long_feeder = JobFeeder(c, api, "moves", interval=0.5, sleep=LONG_COMMAND)
    feeder.start()
    long_feeder.start()
    try:
        time.sleep(6)
        joined_at = time.time()
        c.wait_serving(c.add_node("node3"))
        c.wait_stable(workers=2)  # node3 holds the shards it was assigned
        measure("node join: shards handed over", time.time() - joined_at, test="moves")
        time.sleep(4)
        victim = next(n for n in sorted(c.nodes) if n != api and n in {"node2", "node3"})
        killed_at = c.kill_node(victim)
        c.wait_stable(workers=2)
        measure("node SIGKILL: shards live-owned", time.time() - killed_at, test="moves")
        time.sleep(4)
    finally:
        feeder.stop()
        long_feeder.stop()
    cron_until = time.time()

    runs_by_job = wait_jobs_final(client, feeder.job_ids + long_feeder.job_ids, timeout=60)
    window = (cron_from + 1, cron_until - 1)
    cron_runs: dict[str, list[Run]] = {}
    for job in [*crons, forbid]:
        runs = wait_cron_final(client, job.id, window)
        client.delete_job(job.id)  # fires after the window may never end: not judged
        cron_runs[job.id] = [r for r in runs if window[0] < r.fire_at.timestamp() < window[1]]
    executions = read_executions(c.records)
    every_run = [r for runs in [*runs_by_job.values(), *cron_runs.values()] for r in runs]

    check_acknowledged_jobs(checks, runs_by_job, executions)
    check_fire_attempts(checks, every_run)
    fire_of = {r.id: (r.job_id, r.fire_key) for r in every_run}
    check_no_overlap(checks, executions, fire_of, lambda e: e.start + c.lease_ttl)
    again, fires = check_runs_once(checks, every_run, executions)
    outcomes = {j: check_cron_coverage(checks, j, runs, window) for j, runs in cron_runs.items()}
    skipped = check_overlap_skips(checks, cron_runs[forbid.id], executions, slack=c.lease_ttl)

    moved = {e.run_id for at in (joined_at, killed_at) for e in in_flight(executions, at)}
    measure("re-executions after a finished execution", again, f"of {fires} fires", "moves")
    measure("runs executing at a shard move", len(moved), "runs", "moves")
    lost = [r for r in every_run if r.reason == RunReason.WORKER_LOST]
    measure("attempts lost (lease lapsed while a shard had no owner)", len(lost), "runs", "moves")
    print(
        f"{len(runs_by_job)} jobs acknowledged, {fires} fires executed, {len(moved)} runs "
        f"executing at a move, {len(lost)} attempts lost (killed as their lease lapsed while "
        f"{victim}'s shards had no owner: its session outlives a lease), {skipped} FORBID "
        f"fires skipped; cron outcomes {outcomes}; worker log:\n"
        + "\n".join(c.grep_logs("no longer serves|now held by|offered elsewhere|killed:"))
    )
    checks.verify()
