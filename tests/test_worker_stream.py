"""The worker's side of the lease stream, against a scripted in-test poller (grpc.aio)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import shardcron
from shardcron.v1 import types_pb2, worker_pb2
from shardcron.worker import HandlerRegistry, Worker
from tests.support.processes import alive
from tests.support.scripted_poller import (
    ScriptedPoller,
    command_lease,
    handler_lease,
    make_worker,
    pid_command,
    read_pid,
    running,
    serve,
)
from tests.support.waiting import until

# -- tests ----------------------------------------------------------------------------


async def test_hello_carries_identity_and_capacity() -> None:
    poller = ScriptedPoller()
    reg = HandlerRegistry(builtins=True)
    reg.register("custom", lambda ctx: None)
    async with serve(poller) as port:
        worker = make_worker(
            port,
            worker_id="w-1",
            slots=3,
            labels={"zone": "a"},
            registry=reg,
            runs_commands=False,
            cpu_millis=1500,
            memory_mb=256,
        )
        async with running(worker):
            await until(lambda: worker.connected, what="Welcome")
            [hello] = poller.hellos
            assert hello.worker_id == "w-1"
            assert hello.slots == 3
            assert dict(hello.labels) == {"zone": "a"}
            assert list(hello.handlers) == ["custom", "echo", "fail", "noop", "sleep"]
            assert hello.runs_commands is False
            assert (hello.cpu_millis, hello.memory_mb) == (1500, 256)
            assert hello.version == shardcron.__version__
            assert not hello.pending_results and not hello.held
            # heartbeats flow at the Welcome's interval even with nothing held
            await until(lambda: len(poller.of_kind("heartbeat")) >= 2, 2, "heartbeats")


async def test_hundred_leases_are_run_and_reported_in_few_messages() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port:
        worker = make_worker(port, slots=100)
        async with running(worker):
            await until(lambda: worker.connected)
            poller.lease(*(handler_lease(f"r{i:03}", "noop", token=10 + i) for i in range(100)))
            await until(lambda: len(poller.results) == 100, what="100 results")
            results = poller.results
            assert {r.state for r in results.values()} == {types_pb2.RUN_STATE_SUCCEEDED}
            assert all(r.fencing_token == 10 + int(r.run_id[1:]) for r in results.values())
            assert len(poller.of_kind("results")) < 20  # batched, not one per run
            assert len(poller.of_kind("started")) < 20
            # each start is told once: by Started, or by the result sent with it
            started = [lease.run_id for m in poller.of_kind("started") for lease in m.leases]
            assert len(started) == len(set(started))
            assert all(r.HasField("started_at") for r in results.values())
            await until(lambda: not worker.links[0].unacked, what="acks applied")
            assert worker.stats["succeeded"] == 100
            assert worker.stats["results_accepted"] == 100
            assert worker.slots_used == 0


async def test_output_is_streamed_before_the_result() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port:
        worker = make_worker(port)
        async with running(worker):
            await until(lambda: worker.connected)
            argv = ["sh", "-c", "echo hello; echo oops >&2; exit 4"]
            poller.lease(command_lease("out", argv, token=7 << 32 | 3))
            await until(lambda: "out" in poller.results)
            res = poller.results["out"]
            assert res.state == types_pb2.RUN_STATE_FAILED
            assert res.reason == types_pb2.RUN_REASON_NON_ZERO_EXIT
            assert res.has_exit_code and res.exit_code == 4
            assert poller.output("out", "stdout") == b"hello\n"
            assert poller.output("out", "stderr") == b"oops\n"
            # the poller keeps output only under the lease's token
            chunks = [c for m in poller.of_kind("output") for c in m.chunks]
            assert {c.fencing_token for c in chunks} == {7 << 32 | 3}
            kinds = [m.WhichOneof("body") for m in poller.received]
            assert max(i for i, k in enumerate(kinds) if k == "output") < kinds.index("results")


async def test_renewals_keep_a_run_alive_past_the_first_ttl() -> None:
    poller = ScriptedPoller(lease_ttl=0.5, heartbeat=0.1)
    async with serve(poller) as port:
        worker = make_worker(port)
        async with running(worker):
            await until(lambda: worker.connected)
            poller.lease(handler_lease("long", "sleep", b"1.2"))
            await until(lambda: "long" in poller.results, 4)
            assert poller.results["long"].state == types_pb2.RUN_STATE_SUCCEEDED
            assert worker.stats["lost"] == 0
            held = [ref.run_id for hb in poller.of_kind("heartbeat") for ref in hb.leases]
            assert held.count("long") >= 5


async def test_revoked_lease_kills_the_process_and_reports_nothing(tmp_path: Path) -> None:
    poller = ScriptedPoller(heartbeat=0.1, renew=lambda run_id: run_id != "doomed")
    pidfile = tmp_path / "pid"
    async with serve(poller) as port:
        worker = make_worker(port, kill_grace=30)  # a revoke must not wait for the grace
        async with running(worker):
            await until(lambda: worker.connected)
            poller.lease(command_lease("doomed", pid_command(pidfile)))
            pid = await read_pid(pidfile)
            t0 = time.monotonic()
            await until(lambda: not alive(pid), 2, "process killed")
            assert time.monotonic() - t0 < 1.0
            await until(lambda: "doomed" not in worker.running, 2)
            await asyncio.sleep(0.2)
            assert "doomed" not in poller.results
            assert worker.stats["lost"] == 1


async def test_unrenewed_lease_is_killed_at_its_deadline(tmp_path: Path) -> None:
    poller = ScriptedPoller(lease_ttl=1.0, heartbeat=0.1, renew=lambda run_id: None)
    pidfile = tmp_path / "pid"
    async with serve(poller) as port:
        worker = make_worker(port, kill_grace=30)
        async with running(worker):
            await until(lambda: worker.connected)
            t0 = time.monotonic()
            poller.lease(command_lease("silent", pid_command(pidfile)))
            pid = await read_pid(pidfile)
            await asyncio.sleep(max(0.0, t0 + 0.7 - time.monotonic()))
            assert alive(pid)  # not before its deadline...
            await until(lambda: not alive(pid), 1.5, "kill at deadline")
            assert time.monotonic() - t0 < 1.5  # ...and not long after it
            await asyncio.sleep(0.2)
            assert "silent" not in poller.results
            assert worker.stats["lost"] == 1


async def test_cancel_terminates_and_reports_cancelled(tmp_path: Path) -> None:
    poller = ScriptedPoller()
    pidfile = tmp_path / "pid"
    async with serve(poller) as port:
        worker = make_worker(port)
        async with running(worker):
            await until(lambda: worker.connected)
            poller.lease(command_lease("c1", pid_command(pidfile), token=7))
            pid = await read_pid(pidfile)
            cancel = worker_pb2.Cancel(
                run_id="c1", fencing_token=7, reason=types_pb2.RUN_REASON_REPLACED
            )
            poller.send(cancels=worker_pb2.Cancels(cancels=[cancel]))
            await until(lambda: "c1" in poller.results, 3)
            res = poller.results["c1"]
            assert res.state == types_pb2.RUN_STATE_CANCELLED
            assert res.reason == types_pb2.RUN_REASON_REPLACED
            assert res.fencing_token == 7
            assert not alive(pid)


async def test_reconnect_resends_pending_results_and_held_leases() -> None:
    first = ScriptedPoller(ack=False)
    async with contextlib.AsyncExitStack() as first_server:
        port = await first_server.enter_async_context(serve(first))
        worker = make_worker(port, kill_grace=0.5)
        async with running(worker):
            await until(lambda: worker.connected)
            first.lease(
                handler_lease("quick", "echo", b"hi", token=3),
                handler_lease("slow", "sleep", b"30", token=4),
            )
            await until(lambda: "quick" in first.results, what="first result")
            # the first poller goes away; a new one takes over its address
            await first_server.aclose()
            second = ScriptedPoller()
            async with serve(second, port):
                await until(lambda: second.hellos and worker.connected, 10, "reconnect")
                hello = second.hellos[0]
                assert [(r.run_id, r.fencing_token) for r in hello.pending_results] == [
                    ("quick", 3)
                ]
                assert hello.pending_results[0].state == types_pb2.RUN_STATE_SUCCEEDED
                assert [(r.run_id, r.fencing_token) for r in hello.held] == [("slow", 4)]
                # the new poller acked and adopted: nothing pending, the run goes on
                await until(lambda: not worker.links[0].unacked, what="ack of pending result")
                assert worker.running == ["slow"]
                assert worker.stats["reconnects"] >= 1
                assert worker.stats["lost"] == 0


async def test_a_poller_message_that_does_not_decode_reopens_the_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port:
        worker = make_worker(port)
        async with running(worker):
            await until(lambda: worker.connected)
            poller.lease(handler_lease("r1", "sleep", b"0.5", token=5))
            await until(lambda: worker.running == ["r1"], what="the run started")
            bad = worker_pb2.Cancel(run_id="r1", fencing_token=5, reason=999)
            poller.send(cancels=worker_pb2.Cancels(cancels=[bad]))
            await until(lambda: len(poller.hellos) == 2, what="a new stream")
            assert [(r.run_id, r.fencing_token) for r in poller.hellos[1].held] == [("r1", 5)]
            # one process, one instance id: the poller lets the new stream replace the old
            first, second = poller.hellos
            assert first.instance_id == second.instance_id == worker.instance_id != ""
            # the cancel was not taken: the run goes on and its result is reported
            await until(lambda: "r1" in poller.results, 3, "the run's result")
            assert poller.results["r1"].state == types_pb2.RUN_STATE_SUCCEEDED
            assert worker.stats["lost"] == 0
    assert "cancels.cancels[0].reason" in caplog.text


async def test_stream_closed_by_poller_reconnects_and_revoked_held_run_dies() -> None:
    poller = ScriptedPoller(lease_ttl=15, heartbeat=5)  # no heartbeat in between
    async with serve(poller) as port:
        worker = make_worker(port, kill_grace=30)
        async with running(worker):
            await until(lambda: worker.connected)
            poller.lease(handler_lease("kept", "sleep", b"30", token=5))
            await until(lambda: worker.running == ["kept"])
            poller.renew = lambda run_id: False  # the next stream refuses to adopt it
            poller.close_stream()
            await until(lambda: len(poller.hellos) == 2, 5, "second Hello")
            assert [r.run_id for r in poller.hellos[1].held] == ["kept"]
            await until(lambda: not worker.running, 2, "revoked run ended")
            assert worker.stats["lost"] == 1
            assert "kept" not in poller.results


async def test_drain_stops_new_work_and_waits_for_running_runs() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port:
        worker = make_worker(port)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.connected)
        poller.lease(handler_lease("d1", "sleep", b"0.3"))
        await until(lambda: worker.running == ["d1"])
        await asyncio.wait_for(worker.stop(drain=True), 5)
        await asyncio.wait_for(task, 5)
        assert [c.limit for c in poller.of_kind("credits")] == [0]
        assert poller.results["d1"].state == types_pb2.RUN_STATE_SUCCEEDED
        assert worker.stats["results_accepted"] == 1


@pytest.mark.parametrize("target_kind", ["list", "callable"])
async def test_several_pollers_get_one_stream_each(target_kind: str) -> None:
    a, b = ScriptedPoller(), ScriptedPoller()
    async with serve(a) as pa, serve(b) as pb:
        addrs = [f"127.0.0.1:{pa}", f"127.0.0.1:{pb}"]
        target = addrs if target_kind == "list" else (lambda: addrs)
        worker = Worker(target, registry=HandlerRegistry(builtins=True))
        async with running(worker):
            await until(lambda: a.hellos and b.hellos, what="two hellos")
            a.lease(handler_lease("from-a", "echo", b"a"))
            b.lease(handler_lease("from-b", "echo", b"b"))
            await until(lambda: "from-a" in a.results and "from-b" in b.results)
            assert "from-b" not in a.results and "from-a" not in b.results
            assert a.output("from-a", "stdout") == b"a"


def credit_limits(poller: ScriptedPoller) -> list[int]:
    return [c.limit for c in poller.of_kind("credits")]


async def test_one_stream_gets_every_slot_and_a_lease_past_them_is_refused() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port, running(make_worker(port, slots=1)) as worker:
        await until(lambda: worker.connected)
        assert poller.hellos[0].HasField("credit_limit")
        assert poller.hellos[0].credit_limit == 1
        poller.lease(handler_lease("r1", "sleep", b"0.3"), handler_lease("r2", "echo", b"x"))
        await until(lambda: "r1" in poller.results, what="r1's result")
        refused = [ref.run_id for msg in poller.of_kind("refused") for ref in msg.leases]
        assert refused == ["r2"]
        assert "r2" not in poller.results
        assert worker.stats["refused"] == 1
        # one stream: its limit is every slot all along, no Credits needed
        assert credit_limits(poller) == []


async def test_two_pollers_share_the_slots_by_their_demand() -> None:
    a, b = ScriptedPoller(), ScriptedPoller()
    async with serve(a) as pa, serve(b) as pb:
        worker = Worker(
            [f"127.0.0.1:{pa}", f"127.0.0.1:{pb}"],
            slots=2,
            registry=HandlerRegistry(builtins=True),
        )
        async with running(worker):
            await until(lambda: a.hellos and b.hellos, what="two hellos")
            await until(lambda: all(link.connected for link in worker.links))
            # nobody asked yet: neither stream may fill a slot
            await asyncio.sleep(0.1)
            limits = {"a": (credit_limits(a) or [a.hellos[0].credit_limit])[-1]}
            limits["b"] = (credit_limits(b) or [b.hellos[0].credit_limit])[-1]
            assert limits == {"a": 0, "b": 0}
            a.send(demand=worker_pb2.Demand(slots=5))
            await until(lambda: credit_limits(a)[-1:] == [2], what="a given both slots")
            b.send(demand=worker_pb2.Demand(slots=1))
            await until(lambda: credit_limits(b)[-1:] == [1], what="b given one slot")
            assert credit_limits(a)[-1] == 1, "a keeps one: the sum stays within 2 slots"
            a.lease(handler_lease("a1", "sleep", b"0.3"))
            b.lease(handler_lease("b1", "sleep", b"0.3"))
            await until(lambda: "a1" in a.results and "b1" in b.results)
            assert not a.of_kind("refused") and not b.of_kind("refused")
            a.send(demand=worker_pb2.Demand(slots=0))
            b.send(demand=worker_pb2.Demand(slots=0))
            await until(
                lambda: credit_limits(a)[-1:] == [0] and credit_limits(b)[-1:] == [0],
                what="idle slots taken back",
            )


async def test_results_and_output_leave_in_messages_a_node_accepts() -> None:
    """A node takes messages of at most 4 MiB and ends a stream that sends a bigger
    one; results with long errors, or many of them, must not add up past it."""
    from shardcron.client.codec.stream import encode_worker_message
    from shardcron.client.stream import Heartbeat, RunOutcome
    from shardcron.client.types import RunState
    from shardcron.coordinator.service import MAX_MESSAGE_BYTES
    from shardcron.worker.leased_runs import MAX_ERROR_CHARS, bounded_error
    from shardcron.worker.outbox import Outbox

    box = Outbox(linger=0)
    error = bounded_error("E" * 100_000)
    assert len(error) < MAX_ERROR_CHARS + 50 and error.startswith("E" * 100)
    for i in range(2000):
        box.result(RunOutcome(run_id=f"r{i}", fencing_token=i, state=RunState.FAILED, error=error))
    box.output("r0", 0, "stdout", b"o" * (20 << 20))
    done = asyncio.Event()
    events = await box.take(done, lambda: Heartbeat(leases=()))
    sizes = [encode_worker_message(e).ByteSize() for e in events]
    assert max(sizes) < MAX_MESSAGE_BYTES // 2
    assert sum(len(e.outcomes) for e in events if hasattr(e, "outcomes")) == 2000


# -- a shard moves (issue 11, item 4) ----------------------------------------------------


class ShardMove:
    """A worker streaming to two scripted pollers, running "r1" leased by ``old``,
    whose handler ends at ``release``; ``moved`` makes ``old`` answer not_owner."""

    def __init__(self, *, new_renews: bool | None) -> None:
        self.release = asyncio.Event()
        self.moved = False
        self.new_renews = new_renews
        self.old = ScriptedPoller(stamp_expiry=True, not_owner=lambda run_id: self.moved)
        self.new = ScriptedPoller(stamp_expiry=True, renew=lambda run_id: self.new_renews)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Worker]:
        reg = HandlerRegistry()

        async def block(ctx) -> None:  # type: ignore[no-untyped-def]
            await self.release.wait()

        reg.register("block", block)
        async with serve(self.old) as p1, serve(self.new) as p2:
            worker = Worker([f"127.0.0.1:{p1}", f"127.0.0.1:{p2}"], registry=reg, kill_grace=1.0)
            async with running(worker):
                await until(lambda: sum(k.connected for k in worker.links) == 2, what="streams")
                self.old.lease(handler_lease("r1", "block", token=7))
                await until(lambda: worker.running == ["r1"], what="the run started")
                yield worker

    def named_to_new(self) -> list[worker_pb2.LeaseRef]:
        return [r for hb in self.new.of_kind("heartbeat") for r in hb.leases]


async def test_a_lease_whose_shard_moved_goes_to_the_poller_that_renews_it() -> None:
    """The poller that leased a run answers not_owner (the run's shard moved): the
    worker names the lease to its other pollers; a refusal from one of them is not a
    revocation (an older poller refuses what it does not serve), a renewal makes that
    poller the lease's own, and the result goes there."""
    move = ShardMove(new_renews=False)
    async with move.running() as worker:
        assert not move.named_to_new(), "named to a poller while its own renews it"
        move.moved = True
        await until(lambda: len(move.named_to_new()) >= 3, what="named to the other poller")
        assert {r.job_id for r in move.named_to_new()} == {"job-r1"}, "named without its job"
        assert worker.running == ["r1"] and worker.stats["lost"] == 0, "a refusal killed it"
        move.new_renews = True
        await until(lambda: worker.stats["moved"] == 1, what="the lease moved")
        move.release.set()
        await until(lambda: "r1" in move.new.results, what="the result at the new owner")
        assert move.new.results["r1"].job_id == "job-r1"
        assert "r1" not in move.old.results
        await until(lambda: not any(link.unacked for link in worker.links), what="acked")


async def test_a_result_whose_shard_moved_is_offered_to_the_other_pollers() -> None:
    move = ShardMove(new_renews=None)
    async with move.running() as worker:
        move.moved = True  # the result reaches the old owner after the move
        move.release.set()
        await until(lambda: "r1" in move.old.results, what="the result at the old owner")
        await until(lambda: "r1" in move.new.results, what="offered to the other poller")
        await until(lambda: worker.stats["results_accepted"] == 1, what="accepted there")
        assert not any(link.unacked for link in worker.links)
        assert worker.stats["results_rejected"] == 0
