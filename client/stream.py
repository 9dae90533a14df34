"""The lease stream's messages as typed values (``WorkerService.Connect``).

A worker and a poller talk over one bidirectional stream. Everything either side
reads from it is one of the frozen classes below, decoded and validated by
``shardcron.client.codec.stream``; nothing past that edge sees protobuf.

Worker to poller: ``Hello`` (first, once), then any of ``Credits``, ``Heartbeat``,
``Started``, ``Results``, ``Output`` and ``Refused``.
Poller to worker: ``Welcome`` (first), then any of ``Leases``, ``Cancels``,
``Renewals``, ``ResultAcks``, ``Demand`` and ``OutputRoom``.

Times are aware UTC datetimes; a fencing token is ``epoch << 32 | sequence``.

``check_hello`` is what a ``Hello`` may say of a worker (``client.limits``): the
poller's edge refuses one past it, and a worker checks its own before it connects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shardcron.client import limits
from shardcron.client.dataclass_copies import fast_init
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Resources, RunReason, RunResultFile, RunState, RunUsage, Task


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRef:
    """One lease, named by its run and fencing token, and the run's job: a poller that
    does not serve the job's shard answers ``not_owner`` ("" : not said)."""

    run_id: str
    fencing_token: int
    job_id: str = ""


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome:
    """How one leased run ended on the worker (``RunResult``). ``state`` is final:
    SUCCEEDED, FAILED, TIMED_OUT or CANCELLED."""

    run_id: str
    fencing_token: int
    state: RunState
    reason: RunReason = RunReason.NONE
    exit_code: int | None = None
    error: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    job_id: str = ""  # the run's job, as in ``LeaseRef``
    usage: RunUsage | None = None  # what its command used; None for a handler
    # why the worker cut the run's output (its spool full, or not drained in time at
    # the run's end); "" when it sent all of it
    output_truncated: str = ""
    output_dropped_bytes: int = 0  # bytes of output the worker dropped
    # the sha256 (hex) of the run's whole output, set by the node that wrote it to the
    # blob store (never read from the wire); "" when it did not see the attempt whole
    output_sha256: str = ""
    # what of its result files the worker left out (and, once past the node's edge,
    # what the node could not keep)
    results_note: str = ""
    results: tuple[RunResultFile, ...] = ()  # set by the node's edge: the files it kept


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultFilePiece:
    """Bytes of one of a run's result files, in order, under the lease ``fencing_token``:
    the node holding that lease writes them to its blob store. ``size`` and ``sha256``
    are the whole file's, in every piece."""

    run_id: str
    fencing_token: int
    name: str
    offset: int
    data: bytes
    size: int
    sha256: str
    last: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultFiles:
    pieces: tuple[ResultFilePiece, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputPiece:
    """Bytes a run wrote, in order, under the lease ``fencing_token``; the poller
    appends them to the run's output only from the stream that holds that lease."""

    run_id: str
    fencing_token: int
    data: bytes
    stream: str = "stdout"  # "stdout" | "stderr"


# --- worker -> poller ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """The first message of a stream: who the worker is, what it can run, and what
    it still holds from an earlier stream (leases to renew, results to report)."""

    worker_id: str
    slots: int
    cpu_millis: int = 0
    memory_mb: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    handlers: frozenset[str] = frozenset()
    runs_commands: bool = False
    version: str = ""
    pending_results: tuple[RunOutcome, ...] = ()
    held: tuple[LeaseRef, ...] = ()
    credit_limit: int | None = None  # None: every slot is this stream's
    # random per worker process, the same on each of its streams: a Hello naming a
    # connected worker replaces its stream only when this matches (a reconnect)
    instance_id: str = ""
    # holds each lease until its due_at before starting it: may be leased ahead of due
    waits_for_due: bool = False
    # keeps a run's output on its disk while an ``OutputRoom`` pauses it
    output_spool: bool = False


def check_hello(hello: Hello, path: str = "hello") -> None:
    """Raises ``InvalidArgument`` naming the field (under ``path``; "" for none) of a
    Hello past the bounds of ``client.limits``: its labels as a job's labels are
    bounded, at most ``MAX_WORKER_HANDLERS`` handler names of ``MAX_HANDLER_NAME``
    characters, ids of ``MAX_ID`` and a version of ``MAX_WORKER_VERSION`` characters.
    What a worker says of itself is listed in every cluster status and held by each
    poller it streams to, for as long as it stays connected."""
    where = f"{path}." if path else ""
    for name, value, limit in (
        ("worker_id", hello.worker_id, limits.MAX_ID),
        ("instance_id", hello.instance_id, limits.MAX_ID),
        ("version", hello.version, limits.MAX_WORKER_VERSION),
    ):
        if len(value) > limit:
            raise InvalidArgument(f"{where}{name}", f"at most {limit} characters, got {len(value)}")
    if len(hello.labels) > limits.MAX_LABELS:
        raise InvalidArgument(f"{where}labels", f"at most {limits.MAX_LABELS} labels")
    for key, value in hello.labels.items():
        if not 0 < len(key) <= limits.MAX_LABEL_KEY or len(value) > limits.MAX_LABEL_VALUE:
            raise InvalidArgument(
                f"{where}labels[{limits.clip(key)}]",
                f"keys are 1-{limits.MAX_LABEL_KEY} characters,"
                f" values at most {limits.MAX_LABEL_VALUE}",
            )
    if len(hello.handlers) > limits.MAX_WORKER_HANDLERS:
        raise InvalidArgument(
            f"{where}handlers",
            f"at most {limits.MAX_WORKER_HANDLERS} handler names, got {len(hello.handlers)}",
        )
    for name in hello.handlers:
        if len(name) > limits.MAX_HANDLER_NAME:
            raise InvalidArgument(
                f"{where}handlers",
                f"{limits.clip(name)!r}: at most {limits.MAX_HANDLER_NAME} characters a name",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Credits:
    """How many slots this stream may fill now (the worker shares its slots among pollers)."""

    limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """Leases the worker still holds and asks to renew."""

    leases: tuple[LeaseRef, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """These leased runs started executing at ``at`` (None: when the poller reads it)."""

    leases: tuple[LeaseRef, ...] = ()
    at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Results:
    outcomes: tuple[RunOutcome, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    pieces: tuple[OutputPiece, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    """Leases the worker will not run (no room, or stopping): nothing of them ran."""

    leases: tuple[LeaseRef, ...] = ()


WorkerEvent = Credits | Heartbeat | Started | Results | Output | Refused | ResultFiles
"""What a worker may send after its ``Hello``."""


# --- poller -> worker ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome:
    """The poller's answer to Hello. A zero duration was not said: the worker keeps
    its own (a default TTL, a third of the TTL between heartbeats)."""

    poller_id: str
    epoch: int
    lease_ttl: timedelta
    heartbeat_interval: timedelta


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGrant:
    """One run handed to a worker, held until ``expires_at`` unless renewed.

    ``expires_at`` is on the poller's clock: the worker kills the run by then (minus
    its safety margin for clock skew) and refuses a lease already past it. None (an
    older poller): ``lease_ttl`` counted from when the lease reached the worker."""

    run_id: str
    job_id: str
    owner: str
    fencing_token: int
    attempt: int
    # the nominal fire and this attempt's due time: told to the worker, which runs the
    # lease whether or not they are there (None: not sent)
    fire_at: datetime | None
    due_at: datetime | None
    task: Task
    timeout: timedelta | None  # None: no timeout
    lease_ttl: timedelta  # zero: the Welcome's
    resources: Resources
    job_name: str = ""
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOrder:
    """Stop this run; ``fencing_token`` 0 names any lease of it."""

    run_id: str
    fencing_token: int
    reason: RunReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Renewal:
    """The answer to one heartbeat ref. ``ok``: the lease now holds until ``expires_at``
    (on the poller's clock; None from an older poller: ``Renewals.lease_ttl`` from the
    heartbeat). Not ok: the lease is gone, stop the run now; unless ``not_owner``: this
    poller does not serve the run's shard (it moved), the lease is not revoked here."""

    run_id: str
    fencing_token: int
    ok: bool
    expires_at: datetime | None = None
    not_owner: bool = False


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ResultAck:
    """The answer to one result. Not accepted: the result is stale, forget it; unless
    ``not_owner``: this poller does not serve the run's shard, offer it elsewhere."""

    run_id: str
    fencing_token: int
    accepted: bool
    reason: str = ""
    not_owner: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Leases:
    grants: tuple[LeaseGrant, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancels:
    orders: tuple[CancelOrder, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Renewals:
    renewals: tuple[Renewal, ...] = ()
    # each ok lease now holds this long from the heartbeat (zero: the Welcome's)
    lease_ttl: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultAcks:
    acks: tuple[ResultAck, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """Slots of ready runs this poller could give the worker beyond its credits."""

    slots: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRoom:
    """The node cannot write these runs' output to the blob store now (``paused``), or
    can again (``resumed``): a paused run's worker keeps its output on its disk."""

    paused: tuple[LeaseRef, ...] = ()
    resumed: tuple[LeaseRef, ...] = ()


PollerEvent = Welcome | Leases | Cancels | Renewals | ResultAcks | Demand | OutputRoom
"""What a poller sends."""
