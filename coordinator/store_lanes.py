"""Whose store calls these are: the poller's draw on a concurrency limit of their own.

A store that bounds its requests in flight (Cassandra: ``max_concurrency``) keeps one
bound for the poller and one for everyone else (the api, the router). With one shared
bound, a burst of creates filled it and a poller turn waited behind them (31 s seen
in a benchmark), with every lease and result of that turn. The poller's task marks
itself once (``mark_poller``); the tasks it starts inherit the mark (asyncio copies
the context), and every other caller is unmarked.

Each bound is a ``Limit``: first come, first served, constant work per request.
``asyncio.Semaphore`` (Python 3.11) scans its queue of waiters on an acquire and
removes a woken waiter from the middle of it, so the thousands of requests queued
behind a create burst cost time quadratic in the queue.
"""

from __future__ import annotations

import asyncio
import collections
from contextvars import ContextVar
from types import TracebackType

_POLLER: ContextVar[bool] = ContextVar("shardcron_poller_calls", default=False)


def mark_poller() -> None:
    """From here on, store calls of the current task (and of the tasks it starts) are
    the poller's."""
    _POLLER.set(True)


class Limit:
    """At most ``limit`` holders at once; the others wait in arrival order. A slot freed
    goes straight to the first waiter still waiting (a cancelled waiter is skipped when
    its turn comes, not searched for), so acquire and release do constant work."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def locked(self) -> bool:
        """True when an ``acquire`` would wait."""
        return self._free == 0 or bool(self._waiters)

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(slot)
        try:
            await slot  # resolved by release: the slot is handed over, _free unchanged
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled():
                self.release()  # handed a slot, then cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            slot = self._waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class Lanes:
    """Two limits of ``limit`` requests in flight each: the poller's and the rest's."""

    def __init__(self, limit: int) -> None:
        self._poller = Limit(limit)
        self._others = Limit(limit)

    def current(self) -> Limit:
        """The limit the calling task's requests draw on."""
        return self._poller if _POLLER.get() else self._others
