"""The row layout of jobs and runs, shared by both stores.

Times are integer microseconds since the epoch, a spec is JSON (each field encoded
as its type annotation says), and jobs and runs are rows of ``JOB_COLS`` and
``RUN_COLS`` in that order. The stores differ only in how a missing time or number
is stored: SQLite stores NULL; Cassandra stores a sentinel, because a null written
to Cassandra is a tombstone. ``RowCodec(null=...)`` is the codec for either.

A row this version cannot decode (written by a newer version, or corrupted) raises
``UnreadableRow`` naming the table, the row id and the reason; ``BadRowLog`` is how
reads of many rows skip such a row, logging and counting it once, so that one bad
row fails alone.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TypeVar

from shardcron.client.errors import FailedPrecondition
from shardcron.client.types import (
    Job,
    JobSpec,
    JobState,
    LateReason,
    Run,
    RunLateness,
    RunReason,
    RunResultFile,
    RunState,
    RunUsage,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- time

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _us(dt: datetime | None) -> Any:
    """Microseconds since the epoch (None stays None); a naive datetime raises TypeError.
    Read off the difference's fields: a fifth faster than dividing it by a microsecond,
    and every time of every run row written goes through here."""
    if dt is None:
        return None
    since = dt - _EPOCH
    return (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds


def _dt(us: int | None) -> Any:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


# --------------------------------------------------------------------------- spec JSON
# A dataclass is stored as a JSON object of all its fields, each encoded as its type
# annotation says: timedelta as integer microseconds, datetime as ISO text, bytes as
# base64, enums by value, tuples as lists, dataclasses as objects, and a union of
# dataclasses (the task) as an object tagged with its class name under "type". A key
# missing from stored JSON takes the field's default (a spec written before it existed).

_Codec = tuple[Callable[[Any], Any], Callable[[Any], Any]]
_PLANS: dict[type, tuple[tuple[tuple[str, Any], ...], dict[str, Any]]] = {}


def _or_none(enc: Callable[[Any], Any], dec: Callable[[Any], Any]) -> _Codec:
    return (lambda v: None if v is None else enc(v)), (lambda v: None if v is None else dec(v))


def _codec(hint: Any) -> _Codec | None:
    """How a value of type ``hint`` goes to JSON and back; None if JSON holds it as it is."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:  # X | None
            inner = _codec(args[0])
            return None if inner is None else _or_none(*inner)
        variants = {cls.__name__: cls for cls in args}
        return (
            lambda v: {"type": type(v).__name__, **_dump(v)},
            lambda d: _load(variants[d["type"]], {k: v for k, v in d.items() if k != "type"}),
        )
    origin = typing.get_origin(hint) or hint
    if origin is timedelta:
        return (lambda v: v // _US), (lambda v: timedelta(microseconds=v))
    if origin is datetime:
        return datetime.isoformat, datetime.fromisoformat
    if origin is bytes:
        return (lambda v: base64.b64encode(v).decode()), base64.b64decode
    if origin is tuple:
        return list, tuple
    if isinstance(origin, type) and issubclass(origin, Enum):
        return str, {e.value: e for e in origin}.__getitem__
    if dataclasses.is_dataclass(origin):
        return _dump, lambda d: _load(origin, d)
    return None  # str, int, float, dict[str, str]


def _plan(cls: type) -> tuple[tuple[tuple[str, Any], ...], dict[str, Any]]:
    """Per dataclass: (field, encoder or None) in field order, and decoders by field."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        codecs = {f.name: _codec(hints[f.name]) for f in dataclasses.fields(cls)}
        plan = _PLANS[cls] = (
            tuple((name, c and c[0]) for name, c in codecs.items()),
            {name: c[1] for name, c in codecs.items() if c is not None},
        )
    return plan


def _dump(obj: Any) -> dict[str, Any]:
    out = {}
    for name, enc in _plan(type(obj))[0]:
        value = getattr(obj, name)
        out[name] = value if enc is None else enc(value)
    return out


def _load(cls: type[T], data: dict[str, Any]) -> T:
    decoders = _plan(cls)[1]
    return cls(**{k: v if k not in decoders else decoders[k](v) for k, v in data.items()})


def _spec_to_json(spec: JobSpec) -> str:
    data = _dump(spec)
    if data["notify"] is None:
        # left out, as a spec written before it existed: the text of a spec without
        # notifications is what it was, which a node of an earlier version still reads
        del data["notify"]
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


# Decoded specs by their JSON: the jobs of one batch (or fleet) store the same text, and
# the poller reads their rows by the thousand, and decoding each one was a large part of
# a cluster node's time. A JobSpec is frozen, so jobs read alike share one, as jobs
# created from one spec do. Bounded: cleared when full; long texts are not kept.
_SPECS: dict[str, JobSpec] = {}
_SPECS_MAX = 1024
_SPEC_TEXT_MAX = 8192  # characters


def _spec_from_json(text: str) -> JobSpec:
    spec = _SPECS.get(text)
    if spec is None:
        spec = _load(JobSpec, json.loads(text))
        if len(text) <= _SPEC_TEXT_MAX:
            if len(_SPECS) >= _SPECS_MAX:
                _SPECS.clear()
            _SPECS[text] = spec
    return spec


# --------------------------------------------------------------------------- rows

_JOB_COLS = (
    "id, owner, name, state, version, schedule_version, spec, next_fire_at, next_fire_key,"
    " idempotency_key, consecutive_failures, pause_reason, created_at, updated_at"
)
_RUN_COLS = (
    "id, job_id, owner, shard, state, dead_letter, due_at, fire_key, fire_at, attempt,"
    " priority, worker_id, lease_token, lease_expires_at, created_at, started_at, ended_at,"
    " exit_code, reason, error, output_bytes, replayed_from, schedule_version,"
    " peak_memory_bytes, cpu_micros, limits_enforced,"
    " late_reason, late_text, late_waited_micros, output_sha256, output_truncated, results"
)
_RUN_COL_COUNT = _RUN_COLS.count(",") + 1


@dataclass(frozen=True, slots=True)
class RowCodec:
    """Jobs and runs to and from rows; ``null`` is how a missing time or number is stored."""

    null: Any = None

    def _time(self, value: datetime | None) -> Any:
        return self.null if value is None else _us(value)

    def _opt_time(self, value: Any) -> datetime | None:
        return None if value is None or value == self.null else _dt(value)

    def _opt(self, value: Any) -> Any:
        return None if value is None or value == self.null else value

    def job_row(self, j: Job, spec_json: str | None = None) -> tuple[Any, ...]:
        """The row of ``j``; ``spec_json``: its spec's JSON, when already encoded."""
        return (
            j.id, j.owner, j.spec.name, str(j.state), j.version, j.schedule_version,
            spec_json or _spec_to_json(j.spec), self._time(j.next_fire_at), j.next_fire_key,
            j.idempotency_key, j.consecutive_failures, j.pause_reason, _us(j.created_at),
            _us(j.updated_at),
        )  # fmt: skip

    def job_rows(self, jobs: Iterable[Job]) -> list[tuple[Any, ...]]:
        """The rows of ``jobs``, each distinct spec object encoded to JSON once (a batch
        created from one spec shares it: ``codec.job_specs_from_proto``)."""
        texts: dict[int, str] = {}  # by id(): every spec stays referenced by its job
        rows = []
        for j in jobs:
            text = texts.get(id(j.spec))
            if text is None:
                text = texts[id(j.spec)] = _spec_to_json(j.spec)
            rows.append(self.job_row(j, text))
        return rows

    def row_job(self, r: Sequence[Any]) -> Job:
        """The job of a row; raises ``UnreadableRow`` when it cannot be decoded."""
        return _decoding("jobs", r, self._job)

    def _job(self, r: Sequence[Any]) -> Job:
        return Job(
            id=r[0], owner=r[1], state=JobState(r[3]), version=r[4], schedule_version=r[5],
            spec=_spec_from_json(r[6]), next_fire_at=self._opt_time(r[7]),
            next_fire_key=r[8] or "", idempotency_key=r[9] or "",
            consecutive_failures=r[10] or 0, pause_reason=r[11] or "",
            created_at=_dt(r[12]), updated_at=_dt(r[13]),
        )  # fmt: skip

    def run_row(self, r: Run) -> tuple[Any, ...]:
        # ``_time`` written out: a run row is written at each of a run's state changes
        null, lease, created, started, ended, used, late = (
            self.null,
            r.lease_expires_at,
            r.created_at,
            r.started_at,
            r.ended_at,
            r.usage,
            r.lateness,
        )
        return (
            r.id, r.job_id, r.owner, r.shard, str(r.state), bool(r.dead_letter),
            _us(r.due_at), r.fire_key, _us(r.fire_at), r.attempt, r.priority, r.worker_id,
            r.lease_token, null if lease is None else _us(lease),
            null if created is None else _us(created), null if started is None else _us(started),
            null if ended is None else _us(ended), null if r.exit_code is None else r.exit_code,
            str(r.reason), r.error, r.output_bytes, r.replayed_from, r.schedule_version,
            null if used is None else used.peak_memory_bytes,
            null if used is None else round(used.cpu_seconds * 1e6),
            used is not None and used.limits_enforced,
            "" if late is None else str(late.reason), "" if late is None else late.text,
            null if late is None else late.waited // _US,
            r.output_sha256, r.output_truncated,
            results_to_json(r.results, r.results_note) if r.results or r.results_note else "",
        )  # fmt: skip

    def row_run(self, r: Sequence[Any]) -> Run:
        """The run of a row; raises ``UnreadableRow`` when it cannot be decoded."""
        return _decoding("runs", r, self._run)

    def _run(self, r: Sequence[Any]) -> Run:
        t = self._opt_time
        return Run(
            id=r[0], job_id=r[1], owner=r[2], shard=r[3], state=RunState(r[4]),
            dead_letter=bool(r[5]), due_at=_dt(r[6]), fire_key=r[7], fire_at=_dt(r[8]),
            attempt=r[9], priority=r[10], worker_id=r[11], lease_token=r[12],
            lease_expires_at=t(r[13]), created_at=t(r[14]), started_at=t(r[15]),
            ended_at=t(r[16]), exit_code=self._opt(r[17]), reason=RunReason(r[18]),
            error=r[19], output_bytes=r[20], replayed_from=r[21], schedule_version=r[22],
            usage=self._usage(r[23], r[24], r[25]), lateness=self._lateness(r[26], r[27], r[28]),
            output_sha256=r[29] or "", output_truncated=r[30] or "",
            **results_from_json(r[31] if len(r) > 31 else None),
        )  # fmt: skip

    def _lateness(self, reason: Any, text: Any, waited_micros: Any) -> RunLateness | None:
        """A run's lateness from its three columns; none where the reason is empty or
        null (a run on time, or written before the columns existed)."""
        if not reason:
            return None
        waited = self._opt(waited_micros)
        return RunLateness(
            reason=LateReason(reason),
            text=text or "",
            waited=timedelta(0, 0, waited or 0),
        )

    def _usage(self, peak: Any, cpu_micros: Any, enforced: Any) -> RunUsage | None:
        """A run's usage from its three columns; none where ``peak`` is null (a handler
        run, or a run written before the columns existed)."""
        if peak is None or peak == self.null:
            return None
        return RunUsage(
            peak_memory_bytes=peak, cpu_seconds=cpu_micros / 1e6, limits_enforced=bool(enforced)
        )


def results_to_json(files: Sequence[RunResultFile], note: str) -> str:
    """A run's ``results`` column: its result files (name, size, sha256) and its note."""
    listed = [[f.name, f.size, f.sha256] for f in files]
    return json.dumps({"files": listed, "note": note}, separators=(",", ":"))


def results_from_json(text: Any) -> dict[str, Any]:
    """The ``results`` and ``results_note`` of a run from its column (empty: none)."""
    if not text:
        return {}
    value = json.loads(text)
    files = tuple(
        RunResultFile(name=str(name), size=int(size), sha256=str(sha))
        for name, size, sha in value.get("files", ())
    )
    return {"results": files, "results_note": str(value.get("note", ""))}


# --------------------------------------------------------------------------- unreadable rows

# What decoding a row that this version cannot read raises inside the codec: a spec
# that is not JSON or not a spec, an enum value it does not know (a row written by a
# newer version), a field of the wrong type.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)


class UnreadableRow(FailedPrecondition):
    """A stored job or run row this version cannot decode.

    ``table`` is ``jobs`` or ``runs``, ``row_id`` the row's id and ``reason`` what
    the codec could not read. Reads of one row by id raise it (the api answers
    FAILED_PRECONDITION "job X cannot be read: ..."); reads of many rows skip the
    row instead (``BadRowLog``), so one bad row fails alone."""

    def __init__(self, table: str, row_id: str, reason: str) -> None:
        noun = {"jobs": "job", "runs": "run"}.get(table, table)
        super().__init__(f"{noun} {row_id} cannot be read: {reason}")
        self.table = table
        self.row_id = row_id
        self.reason = reason


def _decoding(table: str, row: Sequence[Any], decode: Callable[[Sequence[Any]], T]) -> T:
    try:
        return decode(row)
    except _DECODE_ERRORS as error:
        raise UnreadableRow(table, str(row[0]), f"{type(error).__name__}: {error}") from error


class BadRowLog:
    """The rows one store met but could not decode, for reads that skip them.

    Each bad row is logged once per (table, row id) and counted once, through the
    counter given to ``count_into`` (the node's ``shardcron_store_bad_rows_total``),
    so a row read again by every poll neither floods the log nor inflates the count.
    """

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._count: Callable[[str], None] = lambda table: None

    def count_into(self, count: Callable[[str], None]) -> None:
        """Counts each newly met bad row with ``count(table)`` from now on."""
        self._count = count

    def skipped(self, bad: UnreadableRow) -> None:
        key = (bad.table, bad.row_id)
        if key in self._seen:
            return
        self._seen.add(key)
        log.error("skipping unreadable row: %s", bad.message)
        self._count(bad.table)

    def decoded(
        self, rows: Iterable[Sequence[Any]], decode: Callable[[Sequence[Any]], T]
    ) -> list[T]:
        """Every row ``decode`` can read, in order; the others are logged, counted, skipped."""
        out: list[T] = []
        for row in rows:
            try:
                out.append(decode(row))
            except UnreadableRow as bad:
                self.skipped(bad)
        return out
