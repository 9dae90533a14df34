"""SIGKILL one Cassandra node of three (RF=3, QUORUM) while jobs are created and run.

What must hold: every acknowledged job ends SUCCEEDED with a complete execution on
record (QUORUM survives one node of three), no run executes twice at once, a
cron job keeps an outcome for every nominal second, and while the node is down
creates keep succeeding (the store writes one partition per request at QUORUM, with
no batch log: multi-partition logged batches used to fail for the 16-20 s until
Cassandra convicted the dead node). The killed node is restarted
with its data before the test ends (the session's other tests share the ring).
Measured: create latency and failed create attempts before / while / after the
node is down.
"""

from __future__ import annotations

import threading
import time

import pytest

from shardcron.client.types import JobSpec, Schedule
from tests.cluster.cluster_harness import (
    Checks,
    JobFeeder,
    Percentiles,
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

KILLED = 1  # the first contact point: every driver's control connection starts there
# QUORUM needs both surviving replicas while the node is down: when one of them
# hiccups for ~2.5 s (a loaded 2-core box), a create's idempotency-key claim (an LWT,
# never retried) can time out, so one failed attempt is tolerated. The bug this
# guards against (multi-partition logged batches) failed every create for 16-20 s.
# How long creates take is measured (printed), not asserted.
MAX_FAILED_WHILE_DOWN = 1  # create attempts


@pytest.mark.timeout(300)
def test_one_cassandra_node_of_three_lost_while_jobs_flow(cluster, cassandra3) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=3, workers=2)
    checks = Checks()
    client = c.client("node1", owner="store-loss")
    cron = client.create_job(
        JobSpec(
            name="every-second", task=c.record_task(), schedule=Schedule.cron_expr("* * * * * *")
        )
    )
    cron_from = time.time()
    feeder = JobFeeder(c, "node2", "store-loss", interval=0.2)
    feeder.start()
    killed_at = restart_begun = restarted_at = None
    restart: list[BaseException | float] = []

    def restart_node() -> None:
        try:
            cassandra3.start_node(KILLED)  # replays its commit log; hints then reach it
            restart.append(time.time())
        except BaseException as e:  # noqa: BLE001 - reported by the test
            restart.append(e)

    restarter = threading.Thread(target=restart_node, daemon=True)
    try:
        time.sleep(4)
        killed_at = time.time()
        cassandra3.kill_node(KILLED)
        time.sleep(10)  # one node of three down: QUORUM must carry on
        restart_begun = time.time()
        restarter.start()  # jobs keep flowing while it comes back
        time.sleep(4)
    finally:
        feeder.stop()
    cron_until = time.time()

    runs_by_job = wait_jobs_final(client, feeder.job_ids, timeout=90)
    window = (cron_from + 1, cron_until - 1)
    cron_runs = wait_cron_final(client, cron.id, window)
    client.delete_job(cron.id)
    if restarter.ident is not None:
        restarter.join(150)
    if restart and isinstance(restart[0], float):
        restarted_at = restart[0]
        measure(
            "cassandra node restart (start_node -> serving)",
            restarted_at - restart_begun,
            test="store",
        )
    checks.expect(
        restarted_at is not None,
        f"the killed Cassandra node did not come back: {restart or 'still starting'}",
    )

    def phase(t: float) -> str:
        if killed_at is None or t < killed_at:
            return "before"
        if restarted_at is None or t < restarted_at:
            return "down"
        return "after"

    lat: dict[str, Percentiles] = {p: Percentiles() for p in ("before", "down", "after")}
    for sent, seconds in feeder.latencies:
        lat[phase(sent)].values.append(seconds)
    fails: dict[str, int] = {p: 0 for p in lat}
    for at, _ in feeder.failed:
        fails[phase(at)] += 1
    for p, values in lat.items():
        if values.values:
            measure(f"create latency p50 ({p} node loss)", values.pct(50), test="store")
            measure(f"create latency max ({p} node loss)", max(values.values), test="store")
        measure(f"failed create attempts ({p} node loss)", fails[p], "attempts", test="store")
    checks.expect(
        feeder.lost_creates == 0,
        f"{feeder.lost_creates} creates failed {feeder.attempts} times in a row: "
        f"{feeder.failed[-3:]}",
    )
    executions = read_executions(c.records)
    acked_by_phase = {p: sum(1 for _, at in feeder.acked if phase(at) == p) for p in lat}
    sent_down_acked = sum(1 for sent, _ in feeder.latencies if phase(sent) == "down")
    checks.expect(
        acked_by_phase["before"] > 5 and sent_down_acked > 0,
        f"the test did not exercise the loss: acknowledged per phase {acked_by_phase}, "
        f"{sent_down_acked} acknowledged creates sent while the node was down",
    )
    check_acknowledged_jobs(checks, runs_by_job, executions)
    check_fire_attempts(checks, [r for runs in runs_by_job.values() for r in runs] + cron_runs)
    fire_of = {r.id: (r.job_id, r.fire_key) for runs in runs_by_job.values() for r in runs}
    fire_of.update({r.id: (r.job_id, r.fire_key) for r in all_runs(client, cron.id)})
    check_no_overlap(checks, executions, fire_of, lambda e: e.start + c.lease_ttl)
    outcomes = check_cron_coverage(checks, cron.id, cron_runs, window)
    lags = [
        e.start - r.due_at.timestamp()
        for runs in runs_by_job.values()
        for r in runs
        for e in executions
        if e.run_id == r.id and killed_at and killed_at <= e.start <= (restarted_at or cron_until)
    ]
    if lags:
        measure("run start lag while a store node is down (max)", max(lags), test="store")
    stall = max((seconds for sent, seconds in feeder.latencies if phase(sent) == "down"), default=0)
    measure("store node loss: longest create while a node was down", stall, test="store")
    checks.expect(
        fails["down"] <= MAX_FAILED_WHILE_DOWN,
        f"creates failed while a store node was down: {fails['down']} failed attempts "
        f"(limit {MAX_FAILED_WHILE_DOWN}) {feeder.failed[:3]}; longest create {stall:.2f}s",
    )
    print(
        f"{len(feeder.acked)} jobs acknowledged ({acked_by_phase}), {len(feeder.failed)} failed "
        f"create attempts ({fails}): {feeder.failed[:5]}, cron outcomes {outcomes}; "
        "store errors in node logs:\n"
        + "\n".join(c.grep_logs(r"WriteTimeout|ReadTimeout|Unavailable|turn failed")[:10])
    )
    checks.verify()
