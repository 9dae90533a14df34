"""A handler run's outcome read once its handler took its first step, with no task of
its own for the run.

A handler is started in its own task (``HandlerExecutor``), and what gives the run's
outcome is a coroutine that waits for it. Most handlers end in their first step, so
after that step one step of the waiting coroutine, taken here from a plain callback,
reads the outcome: the run needs no task besides its handler's, and no wake-up (a task
per run and its two steps were a large part of a worker's time in a burst). A coroutine
that has more to wait for goes on, in a task, from where it stopped (``Resumed``).
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Generator
from typing import Any

from shardcron.client.types import RunReason

from .context import ExecResult, failed_result

log = logging.getLogger(__name__)


def worker_error(run_id: str, error: Exception) -> ExecResult:
    """The outcome of a run whose starting or waiting failed in the worker itself."""
    log.error("run %s: worker error", run_id, exc_info=error)
    return failed_result(RunReason.HANDLER_ERROR, f"worker error: {type(error).__name__}: {error}")


class Resumed:
    """Awaits a coroutine that already took a step and yielded ``yielded``: hands that on
    to the task awaiting this (a future it waits for, or None for a bare yield), then
    drives the rest, passing on what the task sends or throws (a cancel)."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, ExecResult], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, ExecResult]:
        coro, yielded = self._coro, self._yielded
        while True:
            try:
                sent = yield yielded
            except BaseException as thrown:
                try:
                    yielded = coro.throw(thrown)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def first_step(run_id: str, outcome: Coroutine[Any, Any, ExecResult]) -> ExecResult | Resumed:
    """Takes the first step of ``outcome`` (outside any task): the run's result if that
    ended it, else what awaits the rest. A worker error ends the run as ``worker_error``."""
    try:
        yielded = outcome.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except Exception as error:
        return worker_error(run_id, error)
    return Resumed(outcome, yielded)
