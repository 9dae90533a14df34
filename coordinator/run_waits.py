"""Waiting until a run is final (``WaitRun``): woken by this node's poller, or by
re-reading the store when the run ends on another node.

The poller announces the runs each turn made final to ``RunEndings.ended``, once that
turn's commit is durable, so a run read after the wake-up is read final. A waiter
registers before it reads the run, so an ending between the read and the wait is
not lost.

Which wake-up a wait gets depends on where the run's shard is served:
- by this node's poller (``shardcron dev``, or a node with the api and poller roles
  that owns the shard): the waiter sleeps until the announcement, and re-reads the
  store only every ``LOCAL_RECHECK`` seconds in case the shard moved away meanwhile;
- by another node's poller: nothing reaches this node when the run ends, so the
  waiter re-reads the store every ``STORE_POLL`` seconds.
Either way a wait ends at its deadline with the run as it then stands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import timedelta

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Run

STORE_POLL = 0.5  # seconds between store reads for a run whose poller is on another node
LOCAL_RECHECK = 5.0  # seconds between store reads for a run this node's poller holds
DEFAULT_WAIT = timedelta(seconds=30)  # WaitRun's timeout when none is given
MAX_WAIT = timedelta(minutes=5)  # the longest one WaitRun call waits


def wait_seconds(timeout: timedelta | None, field: str = "timeout") -> float:
    """A WaitRun timeout in seconds: unset or zero is ``DEFAULT_WAIT``; negative or over
    ``MAX_WAIT`` is INVALID_ARGUMENT."""
    if timeout is None or timeout == timedelta(0):
        return DEFAULT_WAIT.total_seconds()
    if timeout < timedelta(0):
        raise InvalidArgument(field, "must not be negative")
    if timeout > MAX_WAIT:
        raise InvalidArgument(field, f"at most {MAX_WAIT.total_seconds():g}s")
    return timeout.total_seconds()


class RunEndings:
    """Who waits for which run on this node, woken when the local poller ends it."""

    def __init__(self) -> None:
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}

    def ended(self, runs: Iterable[Run]) -> None:
        """The poller's announcement: these runs are final, durably. Any task."""
        for run in runs:
            for fut in self._waiters.get(run.id, ()):
                if not fut.done():
                    fut.set_result(None)

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[asyncio.Future[None]]:
        """A future done once ``ended`` names ``run_id``, for the ``with`` block."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_id, []).append(fut)
        try:
            yield fut
        finally:
            waiting = self._waiters.get(run_id, [])
            if fut in waiting:
                waiting.remove(fut)
            if not waiting:
                self._waiters.pop(run_id, None)
            fut.cancel()

    def waiting(self) -> int:
        """How many waits are registered (for tests: none is left behind)."""
        return sum(len(w) for w in self._waiters.values())


async def wait_final(
    run_id: str,
    read: Callable[[], Awaitable[Run]],
    *,
    endings: RunEndings,
    served_here: Callable[[int], bool],
    seconds: float,
) -> Run:
    """The run once it is final, or as it stands after ``seconds``. ``read`` reads it
    from the store (and raises NotFound for an unknown one); ``served_here(shard)``
    says whether this node's poller announces the run's end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        with endings.watch(run_id) as ended:
            run = await read()
            left = deadline - loop.time()
            if run.is_final or left <= 0:
                return run
            pause = LOCAL_RECHECK if served_here(run.shard) else STORE_POLL
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(ended), min(left, pause))
