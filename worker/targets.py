"""Where a worker's pollers are: its target, read as a list of poller addresses.

A target is "host:port" (several comma-separated), a list of them, or a callable (sync
or async) returning the current list: the live pollers in ZooKeeper for ``shardcron
worker --zk``. ``Worker`` re-reads a callable target every ``TARGET_REFRESH`` seconds,
and at once when told the list changed (``next_reading`` returns early).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence

from shardcron.client.sdk.connection import split_targets

Target = str | Sequence[str] | Callable[[], list[str] | Awaitable[list[str]]]
TARGET_REFRESH = 5.0


async def read_targets(target: Target) -> list[str]:
    """The poller addresses ``target`` names now, in order, without repeats."""
    if isinstance(target, str):
        return split_targets(target)
    if callable(target):
        found = target()
        if inspect.isawaitable(found):
            found = await found
        return list(dict.fromkeys(found))
    return list(dict.fromkeys(target))


async def next_reading(changed: asyncio.Event, stopped: asyncio.Event) -> None:
    """Waits until the list ``changed`` (and clears it), the worker ``stopped``, or the
    next periodic re-read is due."""
    waits = {asyncio.ensure_future(changed.wait()), asyncio.ensure_future(stopped.wait())}
    try:
        await asyncio.wait(waits, timeout=TARGET_REFRESH, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    changed.clear()
