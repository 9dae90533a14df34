"""Rules every ``JobStore`` keeps, written once for SQLite and Cassandra.

The api and the pollers rely on these whichever store holds the data; a store that
drifted from them would lose a run (a scan that misses its shard or bucket) or run
one twice (a replayed write moving a finished run back to PENDING), or take a page
token of one listing for another:

- the layout (shard count, bucket size, output cap) and the check that a store
  opened on existing data was created with the same shard count and bucket size;
- the run-state order: a stored run is never moved back to an earlier state;
- page tokens, page sizes and pages, bounded in count and in bytes; a page of
  rows skips the rows that cannot be decoded (``make_row_page``);
- where a run's kept output starts once it passes the cap (``output_head``,
  ``keep_tail``);
- the filters of ``list_jobs`` and ``list_runs``, and the order and token of
  ``list_owner_runs``;
- what a ``JobProgress`` writes;
- when a final run expires under a retention (``run_expires_at``);
- handing a result computed off the event loop back to a waiting caller.

These are values and pure functions, not a base class: the stores share rules, not
I/O (one runs SQL on a writer thread, the other concurrent CQL requests), so each
calls these where its own I/O needs them, with no hooks to follow across files, and
every rule is tested on its own (tests/test_store_rules.py).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from shardcron.client.errors import InvalidArgument
from shardcron.client.saturating import saturating_add
from shardcron.client.types import FINAL_RUN_STATES, Job, JobState, Page, Run, RunState
from shardcron.coordinator.rows import BadRowLog
from shardcron.coordinator.store import (
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_OUTPUT_CAP_BYTES,
    DEFAULT_SHARD_COUNT,
    JobProgress,
)

T = TypeVar("T")

# --------------------------------------------------------------------------- retention


def run_expires_at(
    *,
    state: str | RunState,
    dead_letter: bool,
    ended_at: datetime | None,
    due_at: datetime,
    retention: timedelta | None,
) -> datetime | None:
    """When a run may be deleted under ``retention``: ``retention`` after it ended (or,
    never started, after it was due). None = never: no retention, a run that is not
    final (it is still to run), or a dead letter (waiting to be replayed or dropped;
    once dropped it is an ordinary final run)."""
    if retention is None or dead_letter or RunState(state) not in FINAL_RUN_STATES:
        return None
    return saturating_add(ended_at or due_at, retention)


# --------------------------------------------------------------------------- layout


class SchemaMismatch(RuntimeError):
    """The store holds another schema version, shard count or bucket size."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreLayout:
    """Where a store puts runs. A run's shard and due bucket are computed from the
    shard count and bucket size when it is written, so a store must be reopened with
    the values it was created with (``check_schema``): with fewer shards, the runs of
    the others would never be scanned again."""

    shard_count: int = DEFAULT_SHARD_COUNT
    bucket_seconds: int = DEFAULT_BUCKET_SECONDS
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES  # per run; may change between opens

    def __post_init__(self) -> None:
        if self.shard_count < 1 or self.bucket_seconds < 1 or self.output_cap_bytes < 0:
            raise ValueError("shard_count and bucket_seconds must be >= 1, output cap >= 0")


def check_schema(
    where: str, stored: tuple[int, int, int], *, layout: StoreLayout, version: int
) -> None:
    """Raises ``SchemaMismatch`` unless ``stored`` (schema version, shard count, bucket
    seconds) is this code's ``version`` and ``layout``. ``where`` names the store."""
    stored_version, shards, bucket = stored
    if stored_version != version:
        raise SchemaMismatch(f"store schema {stored_version}, this code knows {version}")
    if (shards, bucket) != (layout.shard_count, layout.bucket_seconds):
        raise SchemaMismatch(
            f"{where} was created with shard_count={shards} and bucket_seconds={bucket},"
            f" not {layout.shard_count} and {layout.bucket_seconds}"
        )


# --------------------------------------------------------------------------- run states
# A run moves PENDING -> LEASED -> RUNNING -> a final state (or to a final state from
# any of them). A write of a run never moves the stored run to an earlier state, so a
# replayed or late write cannot bring a finished run back to life.

_FINAL_ORDER = 3
RUN_STATE_ORDER: Mapping[RunState, int] = MappingProxyType(
    {RunState.PENDING: 0, RunState.LEASED: 1, RunState.RUNNING: 2}
    | dict.fromkeys(sorted(FINAL_RUN_STATES), _FINAL_ORDER)
)
# The states of runs that are not final, in order.
ACTIVE_RUN_STATES: tuple[RunState, ...] = tuple(
    s for s in RUN_STATE_ORDER if RUN_STATE_ORDER[s] < _FINAL_ORDER
)


def run_state_order(state: str | RunState) -> int:
    """The place of ``state`` in the order; a write of a lower one loses to the stored run.
    A stored state this version does not know (a newer version's) counts as final, as
    in ``state_order_sql``: such a run row is never moved back, and never raises."""
    try:
        return RUN_STATE_ORDER[RunState(state)]
    except ValueError:
        return _FINAL_ORDER


def state_order_sql(column: str) -> str:
    """``run_state_order`` of ``column`` as an SQL expression."""
    whens = " ".join(f"WHEN '{s}' THEN {RUN_STATE_ORDER[s]}" for s in ACTIVE_RUN_STATES)
    return f"CASE {column} {whens} ELSE {_FINAL_ORDER} END"


# --------------------------------------------------------------------------- pages
# A page token is the last id of the previous page, tagged with the listing it came from.

MAX_PAGE_SIZE = 1000


class PageKind(StrEnum):
    """The listing a page token belongs to (its tag; tokens already issued use these)."""

    JOBS = "job"
    RUNS = "run"
    DEAD_LETTERS = "dead"
    OWNER_RUNS = "owner-run"
    DELIVERIES = "delivery"


def clamp_page_size(requested: int) -> int:
    """The page size served for ``requested``: clamped to 1..MAX_PAGE_SIZE, never an error."""
    return max(1, min(MAX_PAGE_SIZE, requested))


def page_token(kind: PageKind, last_id: str) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{last_id}".encode()).decode()


def page_token_after(kind: PageKind, token: str) -> str | None:
    """The id a page starts after (None for the first page). Raises ``InvalidArgument``
    (field ``page_token``) for a token this store did not issue for ``kind``."""
    if not token:
        return None
    try:
        prefix, _, after = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
    except ValueError:
        prefix, after = "", ""
    if prefix != kind or not after:
        raise InvalidArgument("page_token", "malformed page token")
    return after


def make_page(kind: PageKind, items: list[T], size: int, key: Callable[[T], str]) -> Page[T]:
    """The first ``size`` of ``items``; a token for the next page when there were more.
    Callers fetch one item more than ``size`` to tell whether another page follows."""
    if len(items) <= size:
        return Page(items=items)
    items = items[:size]
    return Page(items=items, next_page_token=page_token(kind, key(items[-1])))


def make_row_page(
    kind: PageKind,
    rows: Sequence[Sequence[Any]],
    size: int,
    decode: Callable[[Sequence[Any]], T],
    bad_rows: BadRowLog,
) -> Page[T]:
    """``make_page`` over rows keyed by their first column, skipping the rows ``decode``
    cannot read (``bad_rows``): whether another page follows, and where it starts, come
    from the rows read, so a skipped row never ends a listing early."""
    head = rows[:size]
    items = bad_rows.decoded(head, decode)
    if len(rows) <= size:
        return Page(items=items)
    return Page(items=items, next_page_token=page_token(kind, str(head[-1][0])))


# ``list_owner_runs`` walks the owner's jobs in id order and each job's runs newest
# first, so its token is a position (job id, run id); an empty run id resumes at the
# job after that one (a Cassandra page that stopped at its scan budget between jobs).
OWNER_RUNS_SEP = "\n"  # in no id: ids are made by the server


def owner_runs_key(run: Run) -> str:
    """The ``OWNER_RUNS`` page key of a run: its job id and its id."""
    return f"{run.job_id}{OWNER_RUNS_SEP}{run.id}"


def owner_runs_token(job_id: str, run_id: str = "") -> str:
    return page_token(PageKind.OWNER_RUNS, f"{job_id}{OWNER_RUNS_SEP}{run_id}")


def owner_runs_after(token: str) -> tuple[str, str] | None:
    """The (job id, run id) an ``OWNER_RUNS`` page starts after; None for the first page.
    Raises ``InvalidArgument`` (field ``page_token``) for any other token."""
    after = page_token_after(PageKind.OWNER_RUNS, token)
    if after is None:
        return None
    job_id, sep, run_id = after.partition(OWNER_RUNS_SEP)
    if not sep or not job_id:
        raise InvalidArgument("page_token", "malformed page token")
    return job_id, run_id


# A page of a listing is also bounded in bytes, so that it reaches a client that keeps
# gRPC's default 4 MiB receive limit whatever the items hold (a job's payload alone may
# be 1 MiB): under that limit with room for the message's own framing.
PAGE_BYTES = 3 << 20
# What a repeated message field adds to each item's encoded size (tag, length).
ITEM_FRAMING_BYTES = 6


def fit_page(
    kind: PageKind,
    page: Page[T],
    sizes: Sequence[int],
    key: Callable[[T], str],
    budget: int = PAGE_BYTES,
) -> Page[T]:
    """The longest head of ``page`` whose items (of encoded ``sizes``) fit in ``budget``
    bytes, with a token resuming after its last item when that is shorter than the page.
    Never empty while the page is not: an item over the budget alone comes alone."""
    used = 0
    for i, size in enumerate(sizes):
        used += size + ITEM_FRAMING_BYTES
        if used > budget and i > 0:
            kept = page.items[:i]
            return Page(items=kept, next_page_token=page_token(kind, key(kept[-1])))
    return page


# --------------------------------------------------------------------------- output
# A run keeps at most the cap of its newest output bytes. Where the kept tail starts is
# chosen on the bytes themselves, not on how they were chunked: at the first line that
# starts in the last ``cap`` bytes, so a reader sees whole lines; but never more than
# half the cap into them, so one long line (or output with no newline) keeps its last
# ``cap`` bytes instead of shrinking the tail to its few last bytes. The stores apply
# this before they write, so bytes past the cap are never stored.


def output_window(head: int, end: int, cap: int) -> tuple[int, int] | None:
    """The absolute range of bytes ``output_head`` must see for an output kept from
    ``head`` and now ending at ``end``; None when all of it fits in ``cap``."""
    if end - head <= cap:
        return None
    start = end - cap
    return max(head, start - 1), min(end, start + cap // 2)


def output_head(end: int, cap: int, window: bytes, window_at: int) -> int:
    """The absolute offset where the kept output starts, given the bytes ``window`` at
    absolute ``window_at``, as ``output_window`` asked for (``head``, ``end``, ``cap``)."""
    start = end - cap
    if cap <= 1:
        return start
    newline = window.find(b"\n", start - 1 - window_at)
    line_start = window_at + newline + 1
    if newline < 0 or line_start > start + cap // 2 or line_start >= end:
        return start
    return line_start


def bytes_in(pieces: Sequence[tuple[int, bytes]], window: tuple[int, int]) -> bytes:
    """The bytes of absolute range ``window`` out of contiguous ``(offset, data)``
    pieces in order."""
    lo, hi = window
    return b"".join(
        d[max(0, lo - at) : hi - at] for at, d in pieces if at < hi and at + len(d) > lo
    )


def place_output(end: int, pieces: Sequence[tuple[str, bytes]]) -> list[tuple[int, str, bytes]]:
    """``(stream, data)`` pieces appended at ``end``, as ``(offset, stream, data)``."""
    placed = []
    for stream, data in pieces:
        if data:
            placed.append((end, stream, data))
            end += len(data)
    return placed


def cut_pieces(pieces: Sequence[tuple[int, str, bytes]], head: int) -> list[tuple[int, str, bytes]]:
    """The ``(offset, stream, data)`` pieces from absolute offset ``head`` on: those
    ending before it dropped, the one holding it cut to start there."""
    return [
        (max(at, head), stream, data[max(0, head - at) :])
        for at, stream, data in pieces
        if at + len(data) > head
    ]


def keep_tail(data: bytes, cap: int) -> bytes:
    """What of ``data``, the newest bytes of a run's output, is worth passing to a
    store: its last ``cap + 1`` bytes. Appending those leaves the store holding the
    same bytes as appending all of ``data`` (the store drops every older byte, and the
    one byte before the last ``cap`` tells it whether they start a line); only the
    offsets of later bytes then count fewer bytes written. A piece cut any shorter
    would let older stored output join it as if nothing had come between."""
    return data if len(data) <= cap + 1 else data[len(data) - cap - 1 :]


# --------------------------------------------------------------------------- filters

# What ``list_jobs`` returns when no states are asked for.
LISTED_JOB_STATES = frozenset(JobState) - {JobState.DELETED}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFilter:
    """The jobs ``list_jobs`` returns: in ``states``, named with ``name_prefix``,
    carrying every label of ``labels``."""

    states: frozenset[JobState] = LISTED_JOB_STATES
    name_prefix: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, states: frozenset[JobState], name_prefix: str, labels: Mapping[str, str] | None
    ) -> JobFilter:
        """From ``list_jobs``'s arguments: no states means every state but DELETED."""
        return cls(
            states=frozenset(states) or LISTED_JOB_STATES,
            name_prefix=name_prefix,
            labels=dict(labels or {}),
        )

    def matches(self, job: Job) -> bool:
        return (
            job.state in self.states
            and job.spec.name.startswith(self.name_prefix)
            and all(job.spec.labels.get(k) == v for k, v in self.labels.items())
        )


def run_state_wanted(states: frozenset[RunState], state: str | RunState) -> bool:
    """``list_runs``'s filter: no states means every state."""
    return not states or RunState(state) in states


# --------------------------------------------------------------------------- progress


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressWrite:
    """What one ``JobProgress`` writes to its job.

    ``columns`` are written whatever the job's state: ``next_fire_at`` (None clears
    it), ``next_fire_key``, ``consecutive_failures``, ``pause_reason``; absent ones
    are left as they are. ``state`` (COMPLETED or PAUSED) is written only on a job
    that is ACTIVE, together with ``state_reason`` when that is not None."""

    columns: Mapping[str, Any]
    state: JobState | None = None
    state_reason: str | None = None


def progress_write(p: JobProgress, *, in_update: bool = False) -> ProgressWrite:
    """The write of ``p`` (store.py, ``JobProgress``). A pause reason sent along with a
    state goes only where the state goes. ``in_update``: the progress of an
    ``update_job``, whose state and pause reason come from the job instead."""
    columns: dict[str, Any] = {}
    if p.next_fire_key == "":  # the schedule is exhausted
        columns |= {"next_fire_at": None, "next_fire_key": ""}
    else:
        if p.next_fire_key is not None:
            columns["next_fire_key"] = p.next_fire_key
        if p.next_fire_at is not None:
            columns["next_fire_at"] = p.next_fire_at
    if p.consecutive_failures is not None:
        columns["consecutive_failures"] = p.consecutive_failures
    if in_update:
        return ProgressWrite(columns=columns)
    if p.pause_reason is not None and p.state is None:
        columns["pause_reason"] = p.pause_reason
    if p.state in (JobState.COMPLETED, JobState.PAUSED):
        return ProgressWrite(columns=columns, state=p.state, state_reason=p.pause_reason)
    return ProgressWrite(columns=columns)


# --------------------------------------------------------------------------- futures


def resolve_future(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Hands a result computed off the loop to its caller (run through
    ``call_soon_threadsafe``). A caller that gave up waiting is left alone: the work
    it asked for happened anyway."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
