"""Waiting for a run to be final (``coordinator/run_waits.py``): woken by the local
poller's announcement, re-reading the store otherwise, and ending at the deadline.

The store is a list of answers the wait reads in turn: these tests count reads and
wake-ups, never time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Run, RunState
from shardcron.coordinator import run_waits
from shardcron.coordinator.run_waits import RunEndings, wait_final, wait_seconds
from tests.support.store_builders import make_job, make_run

PENDING = make_run(make_job())
DONE = dataclasses.replace(PENDING, state=RunState.SUCCEEDED)


class Reads:
    """The run as the store gives it: ``answers`` in turn, the last one from then on."""

    def __init__(self, *answers: Run) -> None:
        self.answers = list(answers)
        self.count = 0
        self.read_once = asyncio.Event()

    async def __call__(self) -> Run:
        self.count += 1
        self.read_once.set()
        return self.answers[min(self.count, len(self.answers)) - 1]


async def test_a_local_run_wakes_its_waiter_when_the_poller_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_waits, "LOCAL_RECHECK", 3600.0)  # only the announcement wakes it
    endings, reads = RunEndings(), Reads(PENDING, DONE)
    waiting = asyncio.create_task(
        wait_final(PENDING.id, reads, endings=endings, served_here=lambda s: True, seconds=7200)
    )
    await reads.read_once.wait()
    endings.ended([DONE])
    assert await waiting == DONE
    assert reads.count == 2  # the first read, and one after the wake-up: no polling
    assert endings.waiting() == 0


async def test_a_run_served_by_another_node_is_polled_in_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_waits, "STORE_POLL", 0.001)
    endings, reads = RunEndings(), Reads(PENDING, PENDING, PENDING, DONE)
    run = await wait_final(
        PENDING.id, reads, endings=endings, served_here=lambda s: False, seconds=7200
    )
    assert run == DONE and reads.count == 4
    assert endings.waiting() == 0


async def test_the_wait_ends_at_its_deadline_with_the_run_as_it_stands() -> None:
    endings, reads = RunEndings(), Reads(PENDING)
    run = await wait_final(
        PENDING.id, reads, endings=endings, served_here=lambda s: True, seconds=0
    )
    assert run == PENDING and reads.count == 1
    assert endings.waiting() == 0


async def test_an_ending_of_another_run_wakes_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_waits, "LOCAL_RECHECK", 3600.0)
    endings, reads = RunEndings(), Reads(PENDING, DONE)
    waiting = asyncio.create_task(
        wait_final(PENDING.id, reads, endings=endings, served_here=lambda s: True, seconds=7200)
    )
    await reads.read_once.wait()
    endings.ended([dataclasses.replace(DONE, id="another-run")])
    await asyncio.sleep(0)
    assert not waiting.done() and reads.count == 1
    endings.ended([DONE])
    assert await waiting == DONE


def test_wait_seconds_defaults_and_bounds() -> None:
    assert wait_seconds(None) == wait_seconds(timedelta(0)) == 30.0
    assert wait_seconds(timedelta(seconds=2.5)) == 2.5
    with pytest.raises(InvalidArgument, match="timeout: at most 300s"):
        wait_seconds(timedelta(minutes=6))
    with pytest.raises(InvalidArgument, match="timeout: must not be negative"):
        wait_seconds(timedelta(seconds=-1))
