"""How long a worker's lease stream has been silent while the worker owed messages.

A frozen worker (SIGSTOP, a stalled machine) keeps its connection open: the kernel
still acknowledges its TCP segments, so only its silence gives it away. A worker
that holds a lease must heartbeat every ``heartbeat_interval``; a worker seen
sending an empty heartbeat heartbeats even when idle (the reference worker does).
The stream of such a worker is *watched*: silent for the poller's
``worker_silence_timeout``, it is taken for frozen and closed (by the edge,
``worker_stream``), so that no new lease, and no retry of a run it held, goes to
it. A worker that sends nothing while idle (the protocol allowed it; the Go
example does so) is watched only while it holds leases of this stream, from when
the first of them went out.

The leases a stream holds, as seen at the edge: added when a ``Lease`` or an ok
``Renewal`` is written to it, removed when the worker reports the run's result,
refuses it, or a ``Renewal`` says it is gone. A lease that lapses on the poller
without a word from the worker stays: its stream stays watched, which is the point.
"""

from __future__ import annotations

from shardcron.client.stream import Heartbeat, Hello, Refused, Results, WorkerEvent
from shardcron.v1 import worker_pb2


class SilenceWatch:
    """The silence of one stream; ``now`` is ``time.monotonic()`` throughout."""

    __slots__ = ("_heard_at", "_held", "_idle_beats")

    def __init__(self, now: float) -> None:
        self._heard_at = now
        self._held: set[tuple[str, int]] = set()
        self._idle_beats = False  # it sent an empty heartbeat: it heartbeats when idle

    def heard(self, event: Hello | WorkerEvent, now: float) -> None:
        """The worker sent ``event`` at ``now``."""
        self._heard_at = now
        match event:
            case Heartbeat(leases=refs) if not refs:
                self._idle_beats = True
            case Results(outcomes=outcomes):
                for outcome in outcomes:
                    self._held.discard((outcome.run_id, outcome.fencing_token))
            case Refused(leases=refs):
                for ref in refs:
                    self._held.discard((ref.run_id, ref.fencing_token))

    def sent(self, msg: worker_pb2.PollerMessage, now: float) -> None:
        """``msg`` was written to the worker at ``now``."""
        body = msg.WhichOneof("body")
        if body == "leases":
            for lease in msg.leases.leases:
                self._hold((lease.run_id, lease.fencing_token), now)
        elif body == "renewals":
            for renewal in msg.renewals.renewals:
                ref = (renewal.run_id, renewal.fencing_token)
                if renewal.ok:
                    self._hold(ref, now)
                else:
                    self._held.discard(ref)

    def _hold(self, ref: tuple[str, int], now: float) -> None:
        if not self._held and not self._idle_beats:
            self._heard_at = max(self._heard_at, now)  # owed messages from now on
        self._held.add(ref)

    def silent_for(self, now: float) -> float | None:
        """Seconds since the worker was last heard from, if it owes messages; None if
        its silence says nothing (idle, and it does not heartbeat when idle)."""
        if not self._held and not self._idle_beats:
            return None
        return now - self._heard_at
