"""How the ``wait_*`` methods of both clients pace their calls and when they give up.

``wait_run`` asks the server to wait (``WaitRun``), at most ``WAIT_CALL_SECONDS`` per
call, and calls again until the run is final or its own timeout passes
(``ServerWait``); against a node too old to have ``WaitRun`` it polls ``GetRun``.
Polling starts fast (50 ms) and doubles up to the poll interval, so a run that ends
quickly is seen quickly without a busy loop on a long one. The clock is the monotonic
one: a wall-clock step changes no timeout.
"""

from __future__ import annotations

import time

import grpc

from shardcron.client.codec import error_from_rpc, run_from_proto
from shardcron.client.sdk import messages
from shardcron.client.types import Run
from shardcron.v1 import jobs_pb2, types_pb2

DEFAULT_POLL_INTERVAL = 0.5  # seconds between polls of wait_run / wait_job_runs, at most
WAIT_CALL_SECONDS = 60.0  # the longest one WaitRun call asks the server to wait


class ServerWait:
    """Successive ``WaitRun`` calls for one run: each waits at most ``WAIT_CALL_SECONDS``
    on the server, all within ``timeout`` seconds (None = never give up); each call's
    own deadline adds ``call_timeout`` to its wait. ``supported`` turns False when the
    node has no ``WaitRun`` (the caller polls instead)."""

    def __init__(self, run_id: str, timeout: float | None, call_timeout: float) -> None:
        self._run_id = run_id
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._call_timeout = call_timeout
        self.supported = True

    def next_call(self) -> tuple[jobs_pb2.WaitRunRequest, float]:
        """The next request and its call's deadline in seconds."""
        seconds = WAIT_CALL_SECONDS
        if self._deadline is not None:
            seconds = max(0.0, min(seconds, self._deadline - time.monotonic()))
        return messages.wait_run_request(self._run_id, seconds), seconds + self._call_timeout

    def answered(self, reply: types_pb2.Run) -> Run | None:
        """The run if it is final; None to call again; TimeoutError once time is up."""
        run = run_from_proto(reply)
        if run.is_final:
            return run
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise TimeoutError(
                f"timed out after {self._timeout:g}s waiting for run {run.id} (state {run.state})"
            )
        return None

    def failed(self, e: grpc.RpcError) -> None:
        """A call failed: the domain error, unless the node lacks ``WaitRun``."""
        if e.code() is not grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
            raise error_from_rpc(e) from e
        self.supported = False


class Waiter:
    """Poll pacing for the wait_* methods: short first delays growing to ``interval``,
    and TimeoutError once ``timeout`` seconds (None = never) have passed."""

    def __init__(self, timeout: float | None, interval: float) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._interval = interval
        self._delay = min(0.05, interval)

    def next_delay(self, waiting_for: str) -> float:
        delay, self._delay = self._delay, min(self._delay * 2, self._interval)
        if self._deadline is None:
            return delay
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {self._timeout:g}s waiting for {waiting_for}")
        return min(delay, left)


def final_runs_wanted(runs: list[Run], count: int, job_id: str) -> str:
    """What is still awaited, or an empty string once ``runs`` holds ``count`` runs."""
    return "" if len(runs) >= count else f"{count} final runs of job {job_id} (have {len(runs)})"
