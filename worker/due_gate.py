"""Leases held until their runs' due instant, and the runs of one instant released
together at it.

A lease given ahead of its run's ``due_at`` (the poller's lease lead; this worker says
``Hello.waits_for_due``) is held until then on this machine's clock before the run
starts (``run_when_due``). A cron fleet's minute or a storm brings thousands of runs
due at one instant: one timer per instant, not per run, releases them, and the release
starts each in one pass (its ``Launch``, made ready while it waited: a handler is
started there, and its start stamped as it is) and reports each ``Started``; each
run's own task then only waits for its result. Started each in its own task, the last
of 10,000 runs of one minute started 0.6 s after the first: each waited for the
others' whole steps, result and all.

A run stopped while it waits (a cancel, or its lease lost) is not started: its result
says so, with no start time. Nor is one whose lease ran out before it could start
(``lease_ran_out``: this process was frozen past the lease's deadline, and the run may
be on another worker by now).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import time
from collections.abc import Coroutine, Iterator
from datetime import datetime
from typing import Any

from shardcron.client.stream import LeaseRef

from .context import ExecResult, stopped_result, utcnow
from .executor import Launch, at_once
from .leased_runs import HeldRun


class DueGate:
    """The runs held until their due instant, by instant, each instant with one timer."""

    def __init__(self) -> None:
        self._instants: dict[
            datetime, list[tuple[HeldRun, LeaseRef, asyncio.Future[Any], Launch]]
        ] = {}

    def __len__(self) -> int:
        """Instants with runs held for them."""
        return len(self._instants)

    async def hold(
        self, run: HeldRun, due_at: datetime, seconds: float, launch: Launch
    ) -> Coroutine[Any, Any, ExecResult] | None:
        """Holds ``run`` until ``due_at`` (``seconds`` from now): then it is started and
        what gives its result is returned; None if it was stopped meanwhile."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[Any] = loop.create_future()
        held = self._instants.get(due_at)
        if held is None:
            held = self._instants[due_at] = []
            loop.call_later(seconds, self._release, due_at)
        held.append((run, run.ref, woken, launch))  # the ref made now: the release is lean

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        stopped = run.ctx.stopped()  # shared: never cancelled
        stopped.add_done_callback(wake)
        try:
            return await woken
        except BaseException:
            if woken.done() and not woken.cancelled() and woken.result() is not None:
                woken.result().close()  # started, but never to be awaited now
            raise
        finally:
            stopped.remove_done_callback(wake)

    def _release(self, due_at: datetime) -> None:
        """Starts every run held for ``due_at`` that was not stopped meanwhile, with the
        cyclic collector held off until the pass is over (``collector_held_off``)."""
        with collector_held_off():
            at, clock = utcnow(), time.monotonic()
            for run, ref, woken, launch in self._instants.pop(due_at, ()):
                if woken.done():
                    continue  # stopped meanwhile
                if run.ctx.stopping or run.deadline <= clock:
                    woken.set_result(None)  # stopped, or its lease ran out (lease_ran_out)
                    continue
                woken.set_result(launch())
                run.link.outbox.started(ref, at)  # its poller now, if the shard moved


@contextlib.contextmanager
def collector_held_off() -> Iterator[None]:
    """No cyclic garbage collection inside the block; the collector runs as usual after
    it. A worker holding the leases of a crowded minute holds hundreds of thousands of
    objects: a full collection that fell inside the release pass stopped it, and the
    runs after that point started that much later than those before."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def lease_ran_out(run: HeldRun) -> bool:
    """The run's lease ran out before it could start: this process was frozen (SIGSTOP,
    a long pause) past its deadline, and its poller may have given the run to another
    worker meanwhile. The watchdog kills such runs once it runs again, but a due
    instant's timer (or a lease read late) can come first; it must not start it."""
    return run.deadline <= time.monotonic()


def start_if_due(
    run: HeldRun, due_at: datetime | None, launch: Launch
) -> Coroutine[Any, Any, ExecResult] | None:
    """Starts ``run`` now if its due instant has come (or is not said): its ``Started``
    goes out, and what gives its result is returned; None if it is due later."""
    now = utcnow()
    if due_at is not None and due_at > now:
        return None
    if lease_ran_out(run):  # not started, and no Started: a lease read after its deadline
        return at_once(dataclasses.replace(stopped_result(run.ctx, False, now), started_at=None))
    run.link.outbox.started(run.ref, now)
    return launch()


async def run_when_due(
    run: HeldRun, due_at: datetime | None, gate: DueGate, launch: Launch
) -> ExecResult:
    """Runs ``run`` (``launch`` starts it) at its due instant: now if that has come (or
    is not said; its ``Started`` goes out now), else once ``gate`` releases it."""
    now_started = start_if_due(run, due_at, launch)
    if now_started is not None:
        return await now_started
    assert due_at is not None
    seconds = (due_at - utcnow()).total_seconds()
    started = await gate.hold(run, due_at, seconds, launch)
    if started is None:
        return dataclasses.replace(stopped_result(run.ctx, False, utcnow()), started_at=None)
    return await started
