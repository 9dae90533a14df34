"""Waiting for a condition in a test: poll it until it holds, or fail saying what was awaited.

One rule for every test: the condition is a callable polled at a fixed interval (in
``until`` it may return an awaitable, such as a store read, which is awaited); the
first truthy value it returns is the result; past the timeout the test fails
with an ``AssertionError`` naming ``what`` and the last value seen. Timeouts are
generous by default because the suite runs on busy machines: they only cost time
when a test fails anyway.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 20.0  # seconds


async def until(
    pred: Callable[[], T | Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "condition",
    interval: float = 0.01,
) -> T:
    """Polls ``pred`` on the running event loop (sleeping ``interval`` between calls, so
    the code under test runs) until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout
    while not (value := await _value(pred())):
        _fail_past(deadline, timeout, what, value)
        await asyncio.sleep(interval)
    return value


async def _value(got: T | Awaitable[T]) -> T:
    return await got if inspect.isawaitable(got) else got  # type: ignore[return-value]


def wait_until(
    pred: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "condition",
    interval: float = 0.05,
) -> T:
    """``until`` for code without an event loop (processes, files, RPCs to another
    process): blocks the thread between polls. The coarser default interval keeps
    polling a server from loading it."""
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        _fail_past(deadline, timeout, what, value)
        time.sleep(interval)
    return value


def _fail_past(deadline: float, timeout: float, what: str, value: object) -> None:
    if time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {value!r}")
