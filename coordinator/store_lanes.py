"""Whose store calls these are: the poller's draw on a concurrency limit of their own.

A store that bounds its requests in flight (Cassandra: ``max_concurrency``) keeps one
bound for the poller and one for everyone else (the api, the router). With one shared
bound, a burst of creates filled it and a poller turn waited behind them (31 s seen
in a benchmark), with every lease and result of that turn. The poller's task marks
itself once (``mark_poller``); the tasks it starts inherit the mark (asyncio copies
the context), and every other caller is unmarked.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

_POLLER: ContextVar[bool] = ContextVar("shardcron_poller_calls", default=False)


def mark_poller() -> None:
    """From here on, store calls of the current task (and of the tasks it starts) are
    the poller's."""
    _POLLER.set(True)


class Lanes:
    """Two limits of ``limit`` requests in flight each: the poller's and the rest's."""

    def __init__(self, limit: int) -> None:
        self._poller = asyncio.Semaphore(limit)
        self._others = asyncio.Semaphore(limit)

    def current(self) -> asyncio.Semaphore:
        """The limit the calling task's requests draw on."""
        return self._poller if _POLLER.get() else self._others
