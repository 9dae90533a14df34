"""A handler run's outcome read after its handler's first step, with no task of its own
(``worker/handler_outcomes.py``): what ends in that step is read at once; what waits goes on
in a task exactly where it stopped, futures, results and cancels passed through."""

from __future__ import annotations

import asyncio

import pytest

from shardcron.client.types import RunReason, RunState
from shardcron.worker.context import ExecResult
from shardcron.worker.handler_outcomes import Resumed, first_step

DONE = ExecResult(state=RunState.SUCCEEDED)


async def _ends_at_once() -> ExecResult:
    return DONE


async def _waits_for(fut: asyncio.Future[str]) -> ExecResult:
    error = await fut
    await asyncio.sleep(0)  # a bare yield after a future: both kinds pass through
    return ExecResult(state=RunState.FAILED, error=error)


async def _raises() -> ExecResult:
    raise ValueError("bad")


async def test_an_outcome_that_ends_in_its_first_step_is_read_at_once() -> None:
    assert first_step("r", _ends_at_once()) is DONE


async def test_an_outcome_that_waits_goes_on_in_a_task_from_where_it_stopped() -> None:
    fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    rest = first_step("r", _waits_for(fut))
    assert isinstance(rest, Resumed)

    async def settle() -> ExecResult:
        return await rest

    task = asyncio.create_task(settle())
    await asyncio.sleep(0.01)
    assert not task.done()  # it waits for the future it yielded, not resumed at once
    fut.set_result("late")
    assert (await task).error == "late"


async def test_a_cancel_reaches_the_outcome_that_waits() -> None:
    fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    cancelled = []

    async def waits() -> ExecResult:
        try:
            await fut
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return DONE

    rest = first_step("r", waits())
    assert isinstance(rest, Resumed)

    async def settle() -> ExecResult:
        return await rest

    task = asyncio.create_task(settle())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [True]


async def test_an_outcome_that_raises_is_a_worker_error() -> None:
    res = first_step("r", _raises())
    assert isinstance(res, ExecResult)
    assert (res.state, res.reason) == (RunState.FAILED, RunReason.HANDLER_ERROR)
    assert res.error == "worker error: ValueError: bad"
