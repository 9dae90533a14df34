"""Which pollers a worker streams to: it follows its target list (the pollers in
ZooKeeper for ``--zk``) and drops a poller that left it, never redialling it."""

from __future__ import annotations

import asyncio
import contextlib

from shardcron.worker import HandlerRegistry, Worker
from tests.support.scripted_poller import ScriptedPoller, handler_lease, running, serve
from tests.support.waiting import until


def link_to(worker: Worker, address: str):
    return next((link for link in worker.links if link.address == address), None)


async def test_a_worker_drops_a_poller_that_left_the_membership() -> None:
    staying, leaving = ScriptedPoller(), ScriptedPoller(lease_ttl=60, heartbeat=20)
    async with serve(staying) as kept_port, contextlib.AsyncExitStack() as leaving_server:
        left_port = await leaving_server.enter_async_context(serve(leaving))
        kept, left = f"127.0.0.1:{kept_port}", f"127.0.0.1:{left_port}"
        members = [kept, left]
        worker = Worker(lambda: list(members), registry=HandlerRegistry(builtins=True))
        async with running(worker):
            await until(lambda: staying.hellos and leaving.hellos, what="two streams")
            leaving.lease(handler_lease("on-left", "sleep", b"30", token=7))
            await until(lambda: worker.running == ["on-left"], what="the run started")
            # the poller dies with a run leased: its link redials it
            await leaving_server.aclose()
            link = link_to(worker, left)
            assert link is not None
            await until(lambda: link.streams >= 2, 5, "a redial of the dead poller")
            # ZooKeeper drops it from the membership
            members.remove(left)
            worker.targets_changed()
            await until(lambda: link.ended, 2, "the link to the departed poller closed")
            assert link_to(worker, left) is None
            streams = link.streams
            await asyncio.sleep(1.5)  # longer than the redial backoff of a live link
            assert link.streams == streams, "the departed poller was dialled again"
            # the other poller's stream is untouched; the run goes on to its deadline
            assert link_to(worker, kept) is not None and len(staying.hellos) == 1
            assert worker.running == ["on-left"]


async def test_a_poller_that_left_but_still_streams_keeps_its_link_until_it_ends() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port:
        address = f"127.0.0.1:{port}"
        members = [address]
        worker = Worker(lambda: list(members), registry=HandlerRegistry(builtins=True))
        async with running(worker):
            await until(lambda: worker.connected, what="a stream")
            poller.lease(handler_lease("r1", "sleep", b"0.5", token=3))
            await until(lambda: worker.running == ["r1"], what="the run started")
            members.clear()
            worker.targets_changed()
            # its run still renews on the stream, and its result is acknowledged there
            await until(lambda: "r1" in poller.results, 3, "the run's result")
            link = worker.links[0]
            await until(lambda: not link.unacked, 2, "the result acknowledged")
            assert worker.stats["lost"] == 0
            poller.close_stream()
            await until(lambda: link.ended, 2, "the stream not reopened")
            await asyncio.sleep(0.5)
            assert len(poller.hellos) == 1


async def test_a_comma_separated_target_gets_one_stream_per_poller() -> None:
    a, b = ScriptedPoller(), ScriptedPoller()
    async with serve(a) as pa, serve(b) as pb:
        worker = Worker(f"127.0.0.1:{pa}, 127.0.0.1:{pb}", registry=HandlerRegistry())
        async with running(worker):
            await until(lambda: a.hellos and b.hellos, what="two hellos")
            assert sorted(link.address for link in worker.links) == sorted(
                [f"127.0.0.1:{pa}", f"127.0.0.1:{pb}"]
            )
