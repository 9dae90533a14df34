"""How many long-lived calls one principal may hold open on one node at once.

A follow of a run's output (``ReadRunOutput`` with ``follow``, over gRPC or HTTP), a
``WaitRun`` and a worker's lease stream each keep a task, a connection and, for the
first two, a store read every fraction of a second alive for as long as they last. A
principal may hold ``CallLimits`` of each at once on a node; one call past the limit
is refused with ``ResourceExhausted`` whose message starts with the limit's name
(``max_follows: ...``), RESOURCE_EXHAUSTED over gRPC and 429 over HTTP, and changes
nothing. Calls are counted per principal, the credential's name (every caller of a
node without an auth file is the one principal ``anonymous``), on this node only.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from shardcron.client.errors import ResourceExhausted


class LongCall(StrEnum):
    """A kind of call a principal may hold open; its value names the limit."""

    FOLLOW = "max_follows"  # ReadRunOutput with follow, either edge
    WAIT = "max_waits"  # WaitRun
    WORKER_STREAM = "max_worker_streams"  # WorkerService.Connect


_WHAT = {
    LongCall.FOLLOW: "output follows",
    LongCall.WAIT: "WaitRun calls",
    LongCall.WORKER_STREAM: "worker streams",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class CallLimits:
    """The most calls of each kind one principal may hold open on one node."""

    follows: int = 32
    waits: int = 256
    worker_streams: int = 256

    def __post_init__(self) -> None:
        for name in ("follows", "waits", "worker_streams"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1")

    def of(self, kind: LongCall) -> int:
        if kind is LongCall.FOLLOW:
            return self.follows
        if kind is LongCall.WAIT:
            return self.waits
        return self.worker_streams


class OpenCalls:
    """The long calls open on this node, by kind and principal (one event loop)."""

    def __init__(self, limits: CallLimits | None = None) -> None:
        self.limits = limits or CallLimits()
        self._open: Counter[tuple[LongCall, str]] = Counter()

    def count(self, kind: LongCall, principal: str) -> int:
        return self._open[(kind, principal)]

    def total(self, kind: LongCall) -> int:
        return sum(n for (k, _), n in self._open.items() if k is kind)

    def acquire(self, kind: LongCall, principal: str) -> None:
        """Counts one more call of ``kind``; ``ResourceExhausted`` (nothing counted) if
        ``principal`` holds its limit already. Pair with ``release``."""
        key = (kind, principal)
        limit = self.limits.of(kind)
        if self._open[key] >= limit:
            raise ResourceExhausted(
                f"{kind.value}: principal {principal} has {limit} {_WHAT[kind]} open on"
                " this node, the most it may: end one first"
            )
        self._open[key] += 1

    def release(self, kind: LongCall, principal: str) -> None:
        key = (kind, principal)
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]

    @contextlib.contextmanager
    def hold(self, kind: LongCall, principal: str) -> Iterator[None]:
        """One call of ``kind`` open for the ``with`` block (see ``acquire``)."""
        self.acquire(kind, principal)
        try:
            yield
        finally:
            self.release(kind, principal)
