"""SIGKILL a worker mid-run; then a worker that answers after its lease was lost.

What must hold: the dead worker's command dies with it; its run is leased again
(the next attempt, on the other worker) only after the old lease ran out; the
re-leased attempt carries a higher fencing token; two attempts never overlap; and a
result carrying the lost lease's token is refused while the current one is accepted.
"""

from __future__ import annotations

import time

import pytest

from shardcron.client.types import HandlerTask, JobSpec, RetryPolicy, RunReason, RunState
from shardcron.coordinator.ids import shard_for
from shardcron.v1 import types_pb2
from tests.cluster.cluster_harness import (
    HEARTBEAT,
    SHARDS,
    Checks,
    RawWorker,
    check_no_overlap,
    measure,
    pid_alive,
    read_executions,
)
from tests.support.waiting import wait_until


@pytest.mark.timeout(240)
def test_worker_sigkill_mid_run_is_released_after_its_ttl(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=3, workers=2)
    checks = Checks()
    client = c.client("node1", owner="worker-kill")
    job = client.create_job(
        JobSpec(name="slow", task=c.record_task(sleep=5), retry=RetryPolicy(max_attempts=1))
    )
    first = wait_until(
        lambda: next(
            (r for r in client.list_runs(job.id).items if r.state == RunState.RUNNING), None
        ),
        20,
        "the job's run RUNNING",
    )
    started = wait_until(
        lambda: [e for e in read_executions(c.records) if e.run_id == first.id],
        5,
        "a start record for the running attempt",
    )
    old = started[0]
    time.sleep(0.5)  # mid-run
    killed_at = c.kill_worker(first.worker_id)
    try:
        gone = wait_until(lambda: not pid_alive(old.pid), 3, "the command killed", 0.01)
    except AssertionError:
        gone = False
    gone_at = time.time()
    checks.expect(gone, f"the dead worker's command (pid {old.pid}) still runs 3 s after the kill")
    measure("orphaned command killed after worker SIGKILL", gone_at - killed_at, test="worker")

    runs = client.wait_job_runs(job.id, count=2, timeout=40)
    lost, done = sorted(runs, key=lambda r: r.attempt)[:2]
    checks.expect(
        (lost.state, lost.reason) == (RunState.FAILED, RunReason.WORKER_LOST),
        f"the killed attempt ended {lost.state}/{lost.reason}",
    )
    checks.expect(
        done.state == RunState.SUCCEEDED
        and done.attempt == 2
        and done.worker_id != first.worker_id,
        f"the second attempt: {done}",
    )
    checks.expect(done.lease_token > lost.lease_token, "the re-lease's token is not higher")
    executions = read_executions(c.records)
    new = [e for e in executions if e.run_id == done.id]
    checks.expect(len(new) == 1 and new[0].end is not None, f"records of the new attempt: {new}")
    if new:
        release_delay = new[0].start - killed_at
        measure(
            "worker re-lease delay (SIGKILL -> next attempt starts)", release_delay, test="worker"
        )
        # the old lease was renewed at most one heartbeat before the kill: it held until
        # at least kill - heartbeat + TTL; the next attempt must not start before that
        earliest = killed_at - HEARTBEAT + c.lease_ttl
        checks.expect(
            new[0].start >= earliest,
            f"the next attempt started {new[0].start - killed_at:.2f}s after the kill, "
            f"before the old lease can have run out ({c.lease_ttl - HEARTBEAT:.2f}s)",
        )
        checks.expect(new[0].start >= gone_at - 0.05, "the next attempt overlapped the old command")
    fire_of = {r.id: (r.job_id, r.fire_key) for r in runs}
    check_no_overlap(
        checks, executions, fire_of, lambda e: gone_at if e.pid == old.pid else e.start
    )

    # A late result with the lost lease's token is refused; the current token's is accepted.
    pollers = {
        n: RawWorker(
            c.nodes[n].target, f"raw-{n}", "raw-only", c.client_tls, token=c.tokens["worker"]
        )
        for n in c.nodes
    }
    try:
        raw_job = client.create_job(
            JobSpec(
                name="raw", task=HandlerTask(name="raw-only"), retry=RetryPolicy(max_attempts=1)
            )
        )
        shard = shard_for(raw_job.id, SHARDS)
        owner = c.zk_owners()[shard][0]
        raw = pollers[owner]
        lease1 = raw.next("leases", timeout=15)
        assert lease1 is not None, f"no lease from {owner}"
        first_lease = lease1.leases.leases[0]
        # no heartbeat names it: the lease runs out, the run is leased again with a new token
        lease2 = raw.next("leases", timeout=c.lease_ttl + 10)
        assert lease2 is not None, "never leased again"
        second_lease = lease2.leases.leases[0]
        checks.expect(
            second_lease.fencing_token > first_lease.fencing_token,
            "the re-lease's token is not higher",
        )
        raw.result(first_lease.run_id, first_lease.fencing_token, types_pb2.RUN_STATE_SUCCEEDED)
        ack = raw.next("acks", timeout=10)
        checks.expect(
            ack is not None and not ack.acks.acks[0].accepted,
            f"a result with the lost lease's token was not refused: {ack}",
        )
        raw.result(second_lease.run_id, second_lease.fencing_token, types_pb2.RUN_STATE_SUCCEEDED)
        ack = raw.next("acks", timeout=10)
        checks.expect(
            ack is not None and ack.acks.acks[0].accepted,
            f"the current lease's result was not accepted: {ack}",
        )
        got = {r.id: r for r in client.wait_job_runs(raw_job.id, count=2, timeout=20)}
        checks.expect(
            got[first_lease.run_id].reason == RunReason.WORKER_LOST
            and got[second_lease.run_id].state == RunState.SUCCEEDED,
            f"runs after the stale result: {list(got.values())}",
        )
    finally:
        for raw in pollers.values():
            raw.close()
    checks.verify()
