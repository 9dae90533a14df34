"""``ended_first``: a run's work, its stop and its timeout, whichever comes first."""

from __future__ import annotations

import asyncio

import pytest

from shardcron.worker.executor import ended_first


async def test_the_job_ending_first_is_true() -> None:
    loop = asyncio.get_running_loop()
    job, stopped = loop.create_future(), loop.create_future()
    loop.call_soon(job.set_result, 1)
    assert await ended_first(job, stopped, None) is True
    assert not stopped.done()


async def test_a_job_already_done_is_true_even_when_stopped() -> None:
    loop = asyncio.get_running_loop()
    job, stopped = loop.create_future(), loop.create_future()
    job.set_result(1)
    stopped.set_result(None)
    assert await ended_first(job, stopped, 0.0) is True


async def test_a_stop_first_is_false_and_leaves_the_job_alone() -> None:
    loop = asyncio.get_running_loop()
    job, stopped = loop.create_future(), loop.create_future()
    loop.call_soon(stopped.set_result, None)
    assert await ended_first(job, stopped, None) is False
    assert not job.done()
    job.set_result(1)  # no callback of the wait is left on it
    await asyncio.sleep(0)


async def test_the_timeout_first_is_false() -> None:
    loop = asyncio.get_running_loop()
    job, stopped = loop.create_future(), loop.create_future()
    assert await ended_first(job, stopped, 0.01) is False
    assert not job.done() and not stopped.done()


async def test_cancelling_the_wait_cancels_only_the_wait() -> None:
    loop = asyncio.get_running_loop()
    job, stopped = loop.create_future(), loop.create_future()
    wait = asyncio.ensure_future(ended_first(job, stopped, None))
    await asyncio.sleep(0)
    wait.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait
    assert not job.done() and not stopped.done()
