"""The contract between the worker and its executors: one run in, one outcome out.

``RunContext`` describes a run and carries its stop signals (``cancel`` asks for a
graceful stop, ``kill`` for an immediate one when the lease is lost); ``ExecResult``
is the outcome; ``HandlerContext`` is what a Python handler receives.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from shardcron.client.dataclass_copies import fast_init
from shardcron.client.stream import ResultFilePiece
from shardcron.client.types import (
    CommandTask,
    HandlerTask,
    Resources,
    RunReason,
    RunState,
    RunUsage,
)

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, bytes], None]


def utcnow() -> datetime:
    return datetime.now(UTC)


_CONDITION_MADE = threading.Lock()


class CancelEvent(threading.Event):
    """A ``threading.Event`` whose condition (a lock and a condition object, most of
    what an Event costs) is made the first time it is set or waited on: a worker makes
    one per run and almost every run ends without either. ``is_set`` reads the flag."""

    def __init__(self) -> None:  # noqa: D107 - the parent's, minus the condition
        self._flag = False

    def __getattr__(self, name: str) -> Any:
        if name != "_cond":
            raise AttributeError(name)
        with _CONDITION_MADE:  # two threads making it at once would wait on different ones
            cond = self.__dict__.get("_cond")
            if cond is None:
                cond = self._cond = threading.Condition(threading.Lock())
        return cond


@dataclass(eq=False, kw_only=True)
class RunContext:
    """One run to execute, and the signals that stop it early.

    ``timeout`` is in seconds (None = none). ``on_output(stream, data)`` receives
    output as it arrives. ``cancel(reason)`` stops the run gracefully (SIGTERM, grace,
    SIGKILL) and ends it CANCELLED; ``kill()`` stops it at once (the lease is lost).
    ``owner`` and ``resources`` (its job's) say as whom and within what limits a
    command runs.
    """

    run_id: str
    task: CommandTask | HandlerTask
    job_id: str = ""
    attempt: int = 1
    fencing_token: int = 0
    timeout: float | None = None
    on_output: OutputCallback | None = None
    # awaited by a command's output readers after each read: holds them back while the
    # stream has not taken what they read (``Outbox.output_room``); None: never waits
    output_room: Callable[[], Awaitable[None]] | None = None
    # given each piece of the command's result files, in order, before its result
    on_result_piece: Callable[[ResultFilePiece], None] | None = None
    # awaited after each piece: ``output_room``, waiting longer (a piece dropped drops
    # its file)
    result_room: Callable[[], Awaitable[None]] | None = None
    # time.monotonic() by which a command must be dead unless its lease is renewed: its
    # supervisor kills it then (None: never); moved by each renewal (``extend_lease``)
    lease_deadline: float | None = None
    owner: str = ""
    resources: Resources | None = None
    # the bytes of the artifact (by sha256) its command names, from the node holding its
    # lease (None: this run cannot fetch one)
    fetch_artifact: Callable[[str], AsyncIterator[bytes]] | None = None
    # told of each renewal: the command's supervisor, once it runs
    on_lease_extended: Callable[[float], None] | None = field(default=None, init=False, repr=False)
    cancel_reason: RunReason = field(default=RunReason.NONE, init=False)
    stopping: bool = field(default=False, init=False)  # cancel() or kill() was called
    killed: bool = field(default=False, init=False)
    # Futures (not Events: waiting on them costs no task) made on first use.
    _stop_fut: asyncio.Future | None = field(default=None, init=False, repr=False)
    _kill_fut: asyncio.Future | None = field(default=None, init=False, repr=False)

    def stopped(self) -> asyncio.Future:
        """Done once ``cancel()`` or ``kill()`` is called. Shared: never cancel it."""
        if self._stop_fut is None:
            self._stop_fut = asyncio.get_running_loop().create_future()
            if self.stopping:
                self._stop_fut.set_result(None)
        return self._stop_fut

    def killed_future(self) -> asyncio.Future:
        """Done once ``kill()`` is called. Shared: never cancel it."""
        if self._kill_fut is None:
            self._kill_fut = asyncio.get_running_loop().create_future()
            if self.killed:
                self._kill_fut.set_result(None)
        return self._kill_fut

    def extend_lease(self, deadline: float) -> None:
        """A renewal moved the lease's deadline (``time.monotonic()``)."""
        self.lease_deadline = deadline
        if self.on_lease_extended is not None:
            self.on_lease_extended(deadline)

    def cancel(self, reason: RunReason = RunReason.CANCELLED_BY_USER) -> None:
        if not self.stopping:
            self.cancel_reason = reason or RunReason.CANCELLED_BY_USER
            self.stopping = True
            resolve_future(self._stop_fut)

    def kill(self) -> None:
        if not self.stopping:
            self.cancel_reason = RunReason.WORKER_LOST
            self.stopping = True
            resolve_future(self._stop_fut)
        self.killed = True
        resolve_future(self._kill_fut)

    def emit(self, stream: str, data: bytes) -> None:
        if data and self.on_output is not None:
            try:
                self.on_output(stream, data)
            except Exception:
                log.exception("output callback failed for run %s", self.run_id)


def resolve_future(fut: asyncio.Future | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ExecResult:
    state: RunState
    reason: RunReason = RunReason.NONE
    exit_code: int | None = None
    error: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    usage: RunUsage | None = None  # what a command used; None for a handler
    results_note: str = ""  # what of its result files was left out, and why


class Executor(Protocol):
    async def execute(self, run: RunContext) -> ExecResult: ...


def stopped_result(
    run: RunContext, timed_out: bool, started: datetime, exit_code: int | None = None
) -> ExecResult:
    """The outcome of a run ended by its timeout, a cancel or a kill."""
    if timed_out and not run.stopping:
        return ExecResult(
            state=RunState.TIMED_OUT,
            reason=RunReason.TIMEOUT,
            exit_code=exit_code,
            error=f"timed out after {run.timeout:g}s",
            started_at=started,
            ended_at=utcnow(),
        )
    what = "killed: lease lost" if run.killed else "cancelled"
    return ExecResult(
        state=RunState.CANCELLED,
        reason=run.cancel_reason,
        exit_code=exit_code,
        error=f"{what} ({run.cancel_reason.value or 'no reason'})",
        started_at=started,
        ended_at=utcnow(),
    )


def failed_result(reason: RunReason, error: str, started: datetime | None = None) -> ExecResult:
    now = utcnow()
    return ExecResult(
        state=RunState.FAILED, reason=reason, error=error, started_at=started or now, ended_at=now
    )


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerContext:
    """What a handler receives. ``deadline`` is a ``time.monotonic()`` value or None;
    ``cancelled`` is set when the run is cancelled or timed out (a sync handler
    should poll it); ``log()`` appends a line to the run's output; ``json()`` decodes
    the payload."""

    run_id: str
    job_id: str = ""
    attempt: int = 1
    fencing_token: int = 0
    payload: bytes = b""
    deadline: float | None = None
    cancelled: threading.Event = field(default_factory=CancelEvent)
    sink: Callable[[str, bytes], None] | None = field(default=None, repr=False, compare=False)

    @property
    def remaining(self) -> float | None:
        """Seconds left before the timeout, or None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def log(self, data: str | bytes, stream: str = "stdout") -> None:
        """Append ``data`` to the run's output (``stream`` "stdout" or "stderr"). Text is a
        line: a newline is added unless it ends with one. Bytes go as they are."""
        if isinstance(data, str):
            data = (data if data.endswith("\n") else data + "\n").encode()
        if data and self.sink is not None:
            self.sink(stream, bytes(data))

    def json(self) -> Any:
        """The payload decoded as JSON (UTF-8). Raises ``ValueError`` if it is not JSON,
        which fails the run with ``HANDLER_ERROR`` naming the error."""
        return json.loads(self.payload)
