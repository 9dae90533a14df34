"""A lease given ahead of its run's due instant, on the worker (``worker/due_gate.py``):
held until ``due_at`` before the run starts, ``Started`` sent only then, and a cancel
during the wait ends it without starting it. Against the scripted in-test poller of
``tests/test_worker_stream.py``; the order of instants is checked, never a speed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.v1 import types_pb2, worker_pb2
from shardcron.worker import HandlerRegistry
from tests.support.waiting import until
from tests.test_worker_stream import ScriptedPoller, handler_lease, make_worker, running, serve


def stamp(at: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(at)
    return ts


def early_lease(run_id: str, name: str, due_at: datetime, token: int = 1) -> worker_pb2.Lease:
    return handler_lease(
        run_id,
        name,
        token=token,
        due_at=stamp(due_at),
        fire_at=stamp(due_at),
        expires_at=stamp(due_at + timedelta(seconds=30)),
    )


def clocked(began: list[datetime]) -> HandlerRegistry:
    """The built-in handlers and ``clocked``, which notes when it began."""
    registry = HandlerRegistry(builtins=True)
    registry.register("clocked", lambda ctx: began.append(datetime.now(UTC)))
    return registry


async def test_hello_says_the_worker_waits_for_due() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port, running(make_worker(port)) as worker:
        await until(lambda: worker.connected, what="Welcome")
        assert poller.hellos[0].waits_for_due


async def test_a_lease_ahead_of_its_due_instant_starts_no_earlier() -> None:
    poller = ScriptedPoller()
    began: list[datetime] = []
    registry = clocked(began)
    async with serve(poller) as port, running(make_worker(port, registry=registry)) as worker:
        await until(lambda: worker.connected)
        due = datetime.now(UTC) + timedelta(seconds=1)
        poller.lease(early_lease("r1", "clocked", due))
        await until(lambda: "r1" in poller.results, what="the result")
        [started] = poller.of_kind("started")
        result = poller.results["r1"]
        assert result.state == types_pb2.RUN_STATE_SUCCEEDED
        assert began[0] >= due
        assert started.at.ToDatetime(UTC) >= due  # Started went out at the real start
        assert result.started_at.ToDatetime(UTC) >= due


async def test_a_cancel_while_waiting_for_the_due_instant_stops_the_run_before_it_starts() -> None:
    poller = ScriptedPoller()
    began: list[datetime] = []
    registry = clocked(began)
    async with serve(poller) as port, running(make_worker(port, registry=registry)) as worker:
        await until(lambda: worker.connected)
        due = datetime.now(UTC) + timedelta(seconds=20)
        poller.lease(early_lease("r1", "clocked", due, token=7))
        await until(lambda: worker.slots_used == 1, what="the lease held")
        cancel = worker_pb2.Cancel(
            run_id="r1", fencing_token=7, reason=types_pb2.RUN_REASON_CANCELLED_BY_USER
        )
        poller.send(cancels=worker_pb2.Cancels(cancels=[cancel]))
        await until(lambda: "r1" in poller.results, what="the result")
        result = poller.results["r1"]
        assert result.state == types_pb2.RUN_STATE_CANCELLED
        assert result.reason == types_pb2.RUN_REASON_CANCELLED_BY_USER
        assert not result.HasField("started_at")
        assert not began and not poller.of_kind("started")
        assert worker.slots_used == 0  # its slot is free for the next lease


async def test_the_runs_of_one_instant_are_released_together_and_a_cancelled_one_never_starts() -> (
    None
):
    # A fleet's minute brings thousands of runs due at one instant: one timer releases
    # them all (due_gate.DueGate), each started in one pass, not each in its own turn.
    poller = ScriptedPoller()
    began: list[datetime] = []
    registry = clocked(began)
    async with (
        serve(poller) as port,
        running(make_worker(port, registry=registry, slots=32)) as worker,
    ):
        await until(lambda: worker.connected)
        due = datetime.now(UTC) + timedelta(seconds=2)
        poller.lease(*(early_lease(f"r{i}", "clocked", due, token=i + 1) for i in range(20)))
        await until(lambda: worker.slots_used == 20, what="the leases held")
        assert len(worker._due_gate) == 1  # one instant, one timer
        cancel = worker_pb2.Cancel(
            run_id="r0", fencing_token=1, reason=types_pb2.RUN_REASON_CANCELLED_BY_USER
        )
        poller.send(cancels=worker_pb2.Cancels(cancels=[cancel]))
        await until(lambda: len(poller.results) == 20, what="the results")
        assert poller.results["r0"].state == types_pb2.RUN_STATE_CANCELLED
        assert not poller.results["r0"].HasField("started_at")
        for i in range(1, 20):
            result = poller.results[f"r{i}"]
            assert result.state == types_pb2.RUN_STATE_SUCCEEDED
            assert result.started_at.ToDatetime(UTC) >= due
        assert len(began) == 19 and min(began) >= due
        started = [ref.run_id for m in poller.of_kind("started") for ref in m.leases]
        assert sorted(started) == sorted(f"r{i}" for i in range(1, 20))
        assert worker.slots_used == 0 and len(worker._due_gate) == 0
