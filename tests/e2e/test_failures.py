"""Failures with real processes: SIGKILL the dev node and the workers while jobs flow.

What must hold: no acknowledged job is lost, every expected fire gets an
outcome (the misfire policy decides which), a run whose worker died is leased
again after its TTL, and a result carrying a stale fencing token is refused.
"""

from __future__ import annotations

import queue
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

from shardcron.client.types import (
    CommandTask,
    HandlerTask,
    JobSpec,
    JobState,
    MisfirePolicy,
    RetryPolicy,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.poller import PollerConfig
from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc
from tests.e2e.harness import DevServer, heartbeat_empty, start_worker
from tests.support.waiting import wait_until


def _final(runs):  # type: ignore[no-untyped-def]
    return [r for r in runs if r.is_final]


def _no_overlap(runs) -> None:  # type: ignore[no-untyped-def]
    spans = sorted((r.started_at, r.ended_at) for r in runs if r.started_at and r.ended_at)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, "two attempts of one job ran at the same time"


def test_sigkill_dev_then_restart_loses_no_acknowledged_job(tmp_path: Path) -> None:
    server = DevServer(
        tmp_path / "data",
        extra=["--workers", "1", "--slots", "8", "--lease-ttl", "2s", "--misfire-grace", "1s"],
    ).start()
    try:
        with server.client("crash") as c:
            sleepers = c.create_jobs(
                [
                    JobSpec(name=f"s{i}", task=HandlerTask(name="sleep", payload=b"0.2"))
                    for i in range(120)
                ]
            )
            at = c.create_job(
                JobSpec(
                    name="at",
                    task=CommandTask(argv=("true",)),
                    schedule=Schedule.once_at(datetime.now(UTC) + timedelta(seconds=2)),
                )
            )
            crons = {
                policy: c.create_job(
                    JobSpec(
                        name=f"cron-{policy.value}",
                        task=HandlerTask(name="noop"),
                        schedule=Schedule.cron_expr("* * * * * *"),
                        misfire=policy,
                    )
                )
                for policy in MisfirePolicy
            }
            time.sleep(1.5)
        server.kill()  # SIGKILL: leases in flight, fires pending
        killed_at = datetime.now(UTC)
        time.sleep(8)
        server.start()
        restarted_at = datetime.now(UTC)
        with server.client("crash") as c:
            # every acknowledged one-off job ends SUCCEEDED, whatever was in flight at the kill
            for job in [*sleepers, at]:
                runs = wait_until(
                    lambda j=job: [
                        r for r in c.list_runs(j.id).items if r.state == RunState.SUCCEEDED
                    ],
                    timeout=60,
                    what=f"job {job.id} succeeded",
                )
                assert len(runs) == 1
                assert c.get_job(job.id).state == JobState.COMPLETED
                _no_overlap(c.list_runs(job.id).items)
            time.sleep(2)
            outcome = {}
            every = {}
            for policy, job in crons.items():
                runs = [
                    r
                    for r in c.list_runs(job.id, page_size=1000).items
                    if r.fire_key.endswith("fold0")
                ]
                # fires surely overdue when the poller came back (it starts before it serves),
                # and not triggered before the kill: a fire is leased up to the lease lead
                # ahead of its instant, and one leased then was in flight at the kill
                overdue = restarted_at - timedelta(seconds=3)
                triggered_down = killed_at + PollerConfig().lease_lead
                down = [r for r in runs if triggered_down < r.fire_at < overdue]
                outcome[policy] = down
                every[policy] = runs
                # every fire while the node was down has a record
                seconds = {r.fire_at.replace(microsecond=0) for r in down}
                assert len(seconds) == len(down)
                assert len(down) >= 4, (policy, [(r.fire_at, r.state) for r in runs])
                c.delete_job(job.id)
            once = outcome[MisfirePolicy.RUN_ONCE]
            # caught up after the restart: the fires missed while down run once at most (the
            # others SKIPPED, below); a fire triggered before the kill and still waiting for a
            # slot then (the sleepers held every slot) is no misfire and runs as well, so
            # runs are found by when they ran, and only those of the down window counted
            caught_up = [
                r
                for r in every[MisfirePolicy.RUN_ONCE]
                if r.state == RunState.SUCCEEDED
                and r.attempt == 1
                and r.started_at is not None
                and r.started_at > killed_at
                and r.fire_at < overdue
            ]
            ran = [(r.fire_at, r.attempt, r.started_at) for r in caught_up]
            assert caught_up, ran  # the pending fire was caught up after the restart
            assert sum(r in once for r in caught_up) <= 1, ran  # the missed ones: once
            assert all(r.reason == RunReason.MISFIRE for r in once if r.state == RunState.SKIPPED)
            skip = outcome[MisfirePolicy.SKIP]
            assert all(r.state == RunState.SKIPPED and r.reason == RunReason.MISFIRE for r in skip)
            run_all = outcome[MisfirePolicy.RUN_ALL]
            assert all(r.state == RunState.SUCCEEDED for r in run_all)
    finally:
        server.stop()


def test_sigkill_worker_mid_run_releases_the_run_after_its_ttl(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "data", extra=["--workers", "0", "--lease-ttl", "2s"]).start()
    first = start_worker(server.target, tmp_path / "w1.log", "--id", "w1", "--slots", "2")
    second = None
    try:
        with server.client("wk") as c:
            marker = tmp_path / "starts"
            job = c.create_job(
                JobSpec(
                    name="slow",
                    task=CommandTask(
                        argv=(
                            "sh",
                            "-c",
                            f'echo "$SHARDCRON_FENCING_TOKEN $$" >> {marker}; sleep 3',
                        )
                    ),
                    retry=RetryPolicy(max_attempts=1),
                )
            )
            run = wait_until(
                lambda: next(
                    (r for r in c.list_runs(job.id).items if r.state == RunState.RUNNING), None
                ),
                what="first attempt running",
            )
            assert run.worker_id == "w1"

            # the run is RUNNING once its shell is spawned, maybe before the shell wrote
            # its pid: read it before the worker (and with it the shell) is killed
            def token_and_pid() -> list[str]:
                words = marker.read_text().split() if marker.exists() else []
                return words if len(words) >= 2 else []

            orphan = int(wait_until(token_and_pid, what="the command's pid")[1])
            first.kill()
            killed = datetime.now(UTC)
            # the dead worker's command dies with it: never two attempts at once
            wait_until(
                lambda: not _alive(orphan), timeout=2, what="the dead worker's command to go"
            )
            second = start_worker(server.target, tmp_path / "w2.log", "--id", "w2", "--slots", "2")
            runs = c.wait_job_runs(job.id, count=2, timeout=30)
            lost, done = sorted(runs, key=lambda r: r.attempt)
            assert (lost.state, lost.reason) == (RunState.FAILED, RunReason.WORKER_LOST)
            assert (done.state, done.worker_id, done.attempt) == (RunState.SUCCEEDED, "w2", 2)
            # not before the lease ran out
            assert done.started_at is not None and done.started_at >= killed + timedelta(seconds=1)
            assert done.lease_token != lost.lease_token
            tokens = [line.split()[0] for line in marker.read_text().splitlines()]
            assert tokens == [str(lost.lease_token), str(done.lease_token)]
    finally:
        first.stop()
        if second is not None:
            second.stop()
        server.stop()


class RawWorker:
    """A worker speaking the lease protocol by hand, to send what a real worker would not."""

    def __init__(self, target: str, handler: str, **hello: object) -> None:
        self.channel = grpc.insecure_channel(target)
        self.out: queue.Queue[worker_pb2.WorkerMessage | None] = queue.Queue()
        hello.setdefault("slots", 4)
        self.out.put(
            worker_pb2.WorkerMessage(
                hello=worker_pb2.Hello(worker_id="raw", handlers=[handler], **hello)  # type: ignore[arg-type]
            )
        )
        stub = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.responses = stub.Connect(iter(self.out.get, None))
        # heard from, renewing nothing: its leases lapse, its stream stays open
        self._beating = heartbeat_empty(self.out)

    def next(self, kind: str, timeout: float = 20.0) -> worker_pb2.PollerMessage:
        deadline = time.monotonic() + timeout
        for msg in self.responses:
            if msg.WhichOneof("body") == kind:
                return msg
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"no {kind} message")

    def result(self, lease: worker_pb2.Lease) -> None:
        result = worker_pb2.RunResult(
            run_id=lease.run_id,
            fencing_token=lease.fencing_token,
            state=types_pb2.RUN_STATE_SUCCEEDED,
        )
        self.out.put(worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[result])))

    def close(self) -> None:
        self._beating.set()
        self.out.put(None)
        self.channel.close()


def test_a_late_result_with_a_stale_token_is_rejected(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "data", extra=["--workers", "0", "--lease-ttl", "1s"]).start()
    raw = RawWorker(server.target, "raw-only")
    try:
        raw.next("welcome")
        with server.client("raw") as c:
            job = c.create_job(JobSpec(name="raw", task=HandlerTask(name="raw-only")))
            first = raw.next("leases").leases.leases[0]
            # no heartbeat names it: the lease runs out and the run is leased again, with a
            # new token
            second = raw.next("leases", timeout=10).leases.leases[0]
            assert second.run_id != first.run_id
            assert second.fencing_token > first.fencing_token
            raw.result(first)  # the late, stale result
            ack = raw.next("acks").acks.acks[0]
            assert (ack.run_id, ack.accepted) == (first.run_id, False)
            raw.result(second)
            ack = raw.next("acks").acks.acks[0]
            assert (ack.run_id, ack.accepted) == (second.run_id, True)
            runs = {r.id: r for r in c.wait_job_runs(job.id, count=2, timeout=10)}
            assert runs[first.run_id].reason == RunReason.WORKER_LOST
            assert runs[second.run_id].state == RunState.SUCCEEDED
            assert runs[second.run_id].lease_token == second.fencing_token
    finally:
        raw.close()
        server.stop()


def test_a_refused_lease_is_leased_again_and_demand_follows_the_credits(tmp_path: Path) -> None:
    """A worker shared with other pollers: credits below its slots make the poller send
    Demand; a lease the worker refuses (its slot went elsewhere) is leased again."""
    server = DevServer(tmp_path / "data", extra=["--workers", "0"]).start()
    raw = RawWorker(server.target, "raw-only", slots=2, credit_limit=0)
    try:
        raw.next("welcome")
        with server.client("raw") as c:
            job = c.create_job(JobSpec(name="shared", task=HandlerTask(name="raw-only")))
            demand = raw.next("demand").demand
            assert demand.slots == 1, "one ready run this worker could take"
            raw.out.put(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(limit=1)))
            first = raw.next("leases").leases.leases[0]
            ref = worker_pb2.LeaseRef(run_id=first.run_id, fencing_token=first.fencing_token)
            raw.out.put(worker_pb2.WorkerMessage(refused=worker_pb2.Refused(leases=[ref])))
            second = raw.next("leases").leases.leases[0]
            assert second.run_id == first.run_id, "the same run: nothing of it ran"
            assert second.fencing_token > first.fencing_token
            raw.result(second)
            ack = raw.next("acks").acks.acks[0]
            assert (ack.run_id, ack.accepted) == (second.run_id, True)
            (run,) = c.wait_job_runs(job.id, count=1, timeout=10)
            assert run.state == RunState.SUCCEEDED
            assert run.lease_token == second.fencing_token
            metrics = server.metrics()
            assert "shardcron_leases_refused_total 1.0" in metrics
    finally:
        raw.close()
        server.stop()


def test_a_worker_that_stops_renewing_kills_its_own_run(tmp_path: Path) -> None:
    """SIGSTOP the dev node: the worker cannot renew, so it kills its command itself."""
    server = DevServer(tmp_path / "data", extra=["--workers", "0", "--lease-ttl", "2s"]).start()
    worker = start_worker(server.target, tmp_path / "w.log", "--id", "w", "--slots", "1")
    pidfile = tmp_path / "pid"
    try:
        with server.client("stop") as c:
            c.create_job(
                JobSpec(
                    name="long",
                    task=CommandTask(argv=("sh", "-c", f"echo $$ > {pidfile}; exec sleep 60")),
                )
            )
            wait_until(
                lambda: pidfile.exists() and pidfile.read_text().strip(), what="command started"
            )
            pid = int(pidfile.read_text())
            assert server.proc is not None
            server.proc.signal(signal.SIGSTOP)
            try:
                # the lease is 2 s: the command must be gone well within 2 s + one heartbeat
                wait_until(
                    lambda: not _alive(pid), timeout=5, what="worker to kill its unrenewed run"
                )
            finally:
                server.proc.signal(signal.SIGCONT)
    finally:
        worker.stop()
        server.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return False
