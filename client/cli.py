"""The user-facing ``shardcron`` commands: jobs, runs, dead letters and cluster status.

``cli`` is the click group the ``shardcron`` program runs; the program module adds its
``dev``, ``node`` and ``worker`` commands with ``cli.add_command(...)`` and finds the
global options in ``ctx.find_object(CliState)``. Commands parse, call the SDK and
print: aligned tables for people, one JSON document with ``--json``. A server error
prints ``error: CODE: message`` on stderr and exits 2 (INVALID_ARGUMENT), 3
(NOT_FOUND), 4 (ABORTED, ALREADY_EXISTS, FAILED_PRECONDITION) or 1, never a traceback.
Importing this module connects to nothing.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from itertools import islice
from typing import Any, TypeVar

import click

from shardcron.client.errors import ShardcronError
from shardcron.client.schedule import format_duration, parse_duration
from shardcron.client.sdk import DEFAULT_TARGET, Client
from shardcron.client.types import (
    DEFAULT_OWNER,
    ClusterStatus,
    CommandTask,
    DstGap,
    DstOverlap,
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    MisfirePolicy,
    OverlapPolicy,
    Run,
    RunState,
    Schedule,
    ScheduleKind,
    Task,
)

D = TypeVar("D")

EXIT_CODES = {
    "INVALID_ARGUMENT": 2,
    "NOT_FOUND": 3,
    "ABORTED": 4,
    "ALREADY_EXISTS": 4,
    "FAILED_PRECONDITION": 4,
}

# --------------------------------------------------------------------------- parameter types


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO 8601 (naive = UTC), ``now``, or ``now+30s``/``now-5m``."""
    t = text.strip()
    if t.lower().startswith("now"):
        base = now or datetime.now(UTC)
        rest = t[3:].strip()
        if not rest:
            return base
        if rest[0] not in "+-":
            raise ValueError(f"invalid time {text!r}: expected now+DURATION or now-DURATION")
        delta = parse_duration(rest[1:])
        return base + delta if rest[0] == "+" else base - delta
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(
            f"invalid time {text!r} (try 2026-03-01T09:00:00+01:00, 2026-03-01T08:00 for UTC, "
            "or now+30s)"
        ) from None
    return dt.replace(tzinfo=UTC) if dt.utcoffset() is None else dt.astimezone(UTC)


class DurationParam(click.ParamType):
    """``500ms``, ``30s``, ``5m``, ``1h30m``, ``2d``; a plain number is seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class TimeParam(click.ParamType):
    """See ``parse_time``."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class KeyValueParam(click.ParamType):
    """``KEY=VALUE`` -> ``(KEY, VALUE)``; the key must not be empty."""

    name = "key=value"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            self.fail(f"expected KEY=VALUE, got {value!r}", param, ctx)
        return key.strip(), val


class PayloadParam(click.ParamType):
    """Text (sent as UTF-8), or ``@FILE`` for the bytes of a file."""

    name = "text|@file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bytes):
            return value
        if not value.startswith("@"):
            return value.encode()
        try:
            with open(value[1:], "rb") as f:
                return f.read()
        except OSError as e:
            self.fail(f"cannot read {value[1:]!r}: {e.strerror}", param, ctx)


class EnumChoice(click.Choice):
    """A choice among an enum's values, written lower-case with hyphens (``run-once``)."""

    def __init__(self, enum_cls: type[Enum]) -> None:
        self.enum_cls = enum_cls
        super().__init__(
            [m.value.lower().replace("_", "-") for m in enum_cls if m.value], case_sensitive=False
        )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.enum_cls):
            return value
        choice = super().convert(value, param, ctx)
        return self.enum_cls(str(choice).upper().replace("-", "_"))


DURATION = DurationParam()
TIME = TimeParam()
KEY_VALUE = KeyValueParam()
PAYLOAD = PayloadParam()


def _usage(message: str) -> click.UsageError:
    return click.UsageError(message, ctx=click.get_current_context(silent=True))


# --------------------------------------------------------------------------- options -> JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """The job flags of ``job create`` and ``job update``; None or empty = not given."""

    name: str | None = None
    argv: tuple[str, ...] = ()
    cron: str | None = None
    tz: str | None = None
    dst_gap: DstGap | None = None
    dst_overlap: DstOverlap | None = None
    at: datetime | None = None
    every: timedelta | None = None
    anchor: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter: timedelta | None = None
    priority: int | None = None
    max_attempts: int | None = None
    backoff: timedelta | None = None
    backoff_multiplier: float | None = None
    max_backoff: timedelta | None = None
    timeout: timedelta | None = None  # 0 = no timeout
    max_concurrent: int | None = None
    overlap: OverlapPolicy | None = None
    misfire: MisfirePolicy | None = None
    starting_deadline: timedelta | None = None  # 0 = none
    slots: int | None = None
    cpu: int | None = None
    memory: int | None = None
    require_labels: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    pause_after_failures: int | None = None
    handler: str | None = None
    payload: bytes | None = None
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None


def spec_from_options(options: JobOptions) -> JobSpec:
    """The spec ``job create`` sends: no schedule flag = immediate; the task is the argv
    or the handler (exactly one). Raises click.UsageError naming the offending option."""
    return apply_options(None, options)


def apply_options(spec: JobSpec | None, o: JobOptions) -> JobSpec:
    """``spec`` with the options given in ``o`` changed (``job update``); None builds a
    new spec (``job create``). Raises click.UsageError naming the offending option."""
    task = _task_from_options(spec.task if spec else None, o)
    schedule = _schedule_from_options(spec.schedule if spec else Schedule.immediate(), o)
    if spec is None:
        if not o.name:
            raise _usage("a job needs a NAME")
        spec = JobSpec(name=o.name, task=task)
    retry = _given(
        spec.retry,
        max_attempts=o.max_attempts,
        initial_backoff=o.backoff,
        multiplier=o.backoff_multiplier,
        max_backoff=o.max_backoff,
    )
    concurrency = _given(spec.concurrency, max_concurrent=o.max_concurrent, overlap=o.overlap)
    resources = _given(
        spec.resources,
        slots=o.slots,
        cpu_millis=o.cpu,
        memory_mb=o.memory,
        labels=dict(o.require_labels) if o.require_labels else None,
    )
    spec = _given(
        spec,
        name=o.name,
        task=task,
        schedule=schedule,
        priority=o.priority,
        retry=retry,
        concurrency=concurrency,
        misfire=o.misfire,
        resources=resources,
        pause_after_failures=o.pause_after_failures,
        labels=dict(o.labels) if o.labels else None,
    )
    if o.timeout is not None:
        spec = spec.replace(timeout=o.timeout or None)
    if o.starting_deadline is not None:
        spec = spec.replace(starting_deadline=o.starting_deadline or None)
    return spec


def _given(obj: D, **changes: Any) -> D:
    """``obj`` with the changes that are not None."""
    given = {k: v for k, v in changes.items() if v is not None}
    return dataclasses.replace(obj, **given) if given else obj  # type: ignore[type-var]


def _task_from_options(current: Task | None, o: JobOptions) -> Task:
    if o.argv and o.handler is not None:
        raise _usage("give either a command after -- or --handler, not both")
    if o.handler is not None or (not o.argv and isinstance(current, HandlerTask)):
        if o.env or o.cwd is not None:
            raise _usage("--env and --cwd apply to a command, not to a --handler task")
        base = current if isinstance(current, HandlerTask) else HandlerTask(name=o.handler or "")
        return _given(base, name=o.handler, payload=o.payload)
    if o.payload is not None:
        raise _usage("--payload needs --handler")
    env = dict(o.env) if o.env else None
    if o.argv:
        base_cmd = current if isinstance(current, CommandTask) else CommandTask(argv=o.argv)
        return _given(base_cmd, argv=tuple(o.argv), env=env, cwd=o.cwd)
    if current is None:
        raise _usage("give the command to run after --, or --handler NAME")
    return _given(current, env=env, cwd=o.cwd)


def _schedule_from_options(current: Schedule, o: JobOptions) -> Schedule:
    given = (("--cron", o.cron), ("--at", o.at), ("--every", o.every))
    kinds = [flag for flag, v in given if v is not None]
    if len(kinds) > 1:
        raise _usage(f"{' and '.join(kinds)} cannot be combined: a job has one schedule")
    window = {"start_at": current.start_at, "end_at": current.end_at, "jitter": current.jitter}
    s = current
    if o.cron is not None:
        keep = (
            {"timezone": s.timezone, "dst_gap": s.dst_gap, "dst_overlap": s.dst_overlap}
            if s.kind is ScheduleKind.CRON
            else {}
        )
        s = Schedule(kind=ScheduleKind.CRON, cron=o.cron, **window, **keep)
    elif o.at is not None:
        s = Schedule(kind=ScheduleKind.AT, at=o.at, **window)
    elif o.every is not None:
        anchor = s.anchor if s.kind is ScheduleKind.INTERVAL else None
        s = Schedule(kind=ScheduleKind.INTERVAL, interval=o.every, anchor=anchor, **window)
    for flag, value in (("--tz", o.tz), ("--dst-gap", o.dst_gap), ("--dst-overlap", o.dst_overlap)):
        if value is not None and s.kind is not ScheduleKind.CRON:
            raise _usage(f"{flag} applies to a --cron schedule only")
    if o.anchor is not None and s.kind is not ScheduleKind.INTERVAL:
        raise _usage("--anchor applies to an --every schedule only")
    return _given(
        s,
        timezone=o.tz,
        dst_gap=o.dst_gap,
        dst_overlap=o.dst_overlap,
        anchor=o.anchor,
        start_at=o.start_at,
        end_at=o.end_at,
        jitter=o.jitter,
    )


def _schedule_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--cron/--tz/--dst-gap/--dst-overlap/--every/--anchor, shared by create, update, preview."""
    for option in reversed(
        [
            click.option("--cron", metavar="EXPR", help="Cron: 5 fields, or 6 with seconds last."),
            click.option("--tz", metavar="ZONE", help="IANA zone the cron is read in [UTC]."),
            click.option(
                "--dst-gap",
                type=EnumChoice(DstGap),
                help="Cron time missing on spring-forward: fire after the gap (shift, default) "
                "or skip.",
            ),
            click.option(
                "--dst-overlap",
                type=EnumChoice(DstOverlap),
                help="Cron time repeated on fall-back: fire once (first, default) or both.",
            ),
            click.option("--every", type=DURATION, help="Fire every DURATION (e.g. 5m, 1h30m)."),
            click.option("--anchor", type=TIME, help="With --every: fire at ANCHOR + k*DURATION."),
        ]
    ):
        f = option(f)
    return f


def _job_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Every JobOptions flag but the name and argv, shared by create and update."""
    options = [
        click.option("--at", type=TIME, help="Run once at TIME (ISO 8601, naive = UTC; now+30s)."),
        click.option("--start-at", type=TIME, help="No fire before TIME."),
        click.option("--end-at", type=TIME, help="No fire after TIME."),
        click.option("--jitter", type=DURATION, help="Delay each fire by a stable random 0..DUR."),
        click.option("--priority", type=int, help="Higher runs first when slots are scarce."),
        click.option(
            "--max-attempts", type=click.IntRange(min=1), help="Total attempts (1 = no retry)."
        ),
        click.option("--backoff", type=DURATION, help="Delay before the first retry [1s]."),
        click.option(
            "--backoff-multiplier",
            type=click.FloatRange(min=0, min_open=True),
            help="Backoff growth per attempt [2].",
        ),
        click.option("--max-backoff", type=DURATION, help="Longest delay between attempts [5m]."),
        click.option("--timeout", type=DURATION, help="Kill a run after DUR (0 = no timeout)."),
        click.option(
            "--max-concurrent", type=click.IntRange(min=0), help="Runs of this job at once."
        ),
        click.option(
            "--overlap", type=EnumChoice(OverlapPolicy), help="A fire while a run is going."
        ),
        click.option(
            "--misfire", type=EnumChoice(MisfirePolicy), help="Fires missed while down [run-once]."
        ),
        click.option(
            "--starting-deadline", type=DURATION, help="A run not started within DUR is MISSED."
        ),
        click.option("--slots", type=click.IntRange(min=1), help="Worker slots a run takes [1]."),
        click.option("--cpu", type=click.IntRange(min=0), help="CPU a run needs, in millicores."),
        click.option("--memory", type=click.IntRange(min=0), help="Memory a run needs, in MB."),
        click.option(
            "--require-label",
            "require_labels",
            type=KEY_VALUE,
            multiple=True,
            help="Run only on workers with this label (repeatable).",
        ),
        click.option(
            "--label", "labels", type=KEY_VALUE, multiple=True, help="Job label (repeatable)."
        ),
        click.option(
            "--pause-after-failures",
            type=click.IntRange(min=0),
            help="Pause the job after N failed runs in a row (0 = never).",
        ),
        click.option("--handler", metavar="NAME", help="Run the worker handler NAME (no ARGV)."),
        click.option("--payload", type=PAYLOAD, help="Handler payload: TEXT or @FILE."),
        click.option(
            "--env", type=KEY_VALUE, multiple=True, help="Command environment (repeatable)."
        ),
        click.option("--cwd", metavar="DIR", help="Command working directory."),
    ]
    for option in reversed(options):
        f = option(f)
    return _schedule_options(f)


# --------------------------------------------------------------------------- output


def to_jsonable(value: Any) -> Any:
    """Dataclasses as dicts, datetimes as ISO strings, timedeltas as seconds, bytes as
    base64, enums by value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    return value


def _table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> None:
    """Print ``rows`` under ``headers`` in left-aligned columns two spaces apart."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """Print ``name  value`` lines with the values aligned."""
    pairs = list(pairs)
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        click.echo(f"{name.ljust(width)}  {value}")


def _time(dt: datetime | None) -> str:
    return dt.astimezone().isoformat(timespec="seconds") if dt else "-"


def _duration(td: timedelta | None) -> str:
    return format_duration(td) if td is not None else "-"


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def _lower(value: Enum) -> str:
    return str(value.value).lower().replace("_", "-") or "-"


def _schedule_text(s: Schedule) -> str:
    if s.kind is ScheduleKind.CRON:
        text = f"cron {s.cron!r} {s.timezone}"
        if s.dst_gap is not DstGap.SHIFT:
            text += f" dst-gap={_lower(s.dst_gap)}"
        if s.dst_overlap is not DstOverlap.FIRST:
            text += f" dst-overlap={_lower(s.dst_overlap)}"
    elif s.kind is ScheduleKind.INTERVAL:
        text = f"every {_duration(s.interval)}"
        if s.anchor:
            text += f" anchor {_time(s.anchor)}"
    elif s.kind is ScheduleKind.AT:
        text = f"at {_time(s.at)}"
    else:
        text = "immediate"
    if s.start_at:
        text += f" from {_time(s.start_at)}"
    if s.end_at:
        text += f" until {_time(s.end_at)}"
    if s.jitter:
        text += f" jitter {_duration(s.jitter)}"
    return text


def _task_text(task: Task) -> str:
    if isinstance(task, CommandTask):
        return shlex.join(task.argv)
    return f"handler {task.name} ({len(task.payload)} bytes of payload)"


def _print_job(job: Job) -> None:
    spec = job.spec
    r, c, res = spec.retry, spec.concurrency, spec.resources
    pairs: list[tuple[str, Any]] = [
        ("id", job.id),
        ("name", spec.name),
        ("owner", job.owner),
        ("state", job.state.value + (f" ({job.pause_reason})" if job.pause_reason else "")),
        ("version", job.version),
        ("schedule", _schedule_text(spec.schedule)),
        ("task", _task_text(spec.task)),
    ]
    if isinstance(spec.task, CommandTask):
        pairs += [("env", _labels(spec.task.env)), ("cwd", spec.task.cwd or "-")]
    pairs += [
        ("next fire", f"{_time(job.next_fire_at)} {job.next_fire_key}".rstrip()),
        ("priority", spec.priority),
        (
            "retry",
            f"{r.max_attempts} attempts, backoff {_duration(r.initial_backoff)} x{r.multiplier:g} "
            f"up to {_duration(r.max_backoff)}, jitter {r.jitter:g}",
        ),
        ("timeout", _duration(spec.timeout)),
        ("concurrency", f"max {c.max_concurrent}, overlap {_lower(c.overlap)}"),
        ("misfire", _lower(spec.misfire)),
        ("starting deadline", _duration(spec.starting_deadline)),
        (
            "resources",
            f"{res.slots} slots, {res.cpu_millis}m cpu, {res.memory_mb}MB, "
            f"worker labels {_labels(res.labels)}",
        ),
        (
            "pause after",
            f"{spec.pause_after_failures} failures" if spec.pause_after_failures else "-",
        ),
        ("failures in a row", job.consecutive_failures),
        ("labels", _labels(spec.labels)),
        ("idempotency key", job.idempotency_key or "-"),
        ("created", _time(job.created_at)),
        ("updated", _time(job.updated_at)),
    ]
    _fields(pairs)


def _print_jobs(jobs: Sequence[Job]) -> None:
    _table(
        (
            (
                j.id,
                j.spec.name,
                j.state.value,
                _schedule_text(j.spec.schedule),
                _time(j.next_fire_at),
                j.version,
            )
            for j in jobs
        ),
        ["ID", "NAME", "STATE", "SCHEDULE", "NEXT FIRE", "VERSION"],
    )


def _print_run(run: Run) -> None:
    _fields(
        [
            ("id", run.id),
            ("job", run.job_id),
            ("state", run.state.value),
            ("reason", run.reason.value or "-"),
            ("error", run.error or "-"),
            ("attempt", run.attempt),
            ("fire", f"{_time(run.fire_at)} {run.fire_key}".rstrip()),
            ("due", _time(run.due_at)),
            ("created", _time(run.created_at)),
            ("started", _time(run.started_at)),
            ("ended", _time(run.ended_at)),
            ("exit code", "-" if run.exit_code is None else run.exit_code),
            ("worker", run.worker_id or "-"),
            ("lease", f"token {run.lease_token} until {_time(run.lease_expires_at)}"),
            ("output", f"{run.output_bytes} bytes"),
            ("priority", run.priority),
            ("shard", run.shard),
            ("replayed from", run.replayed_from or "-"),
            ("dead letter", "yes" if run.dead_letter else "no"),
        ]
    )


def _print_runs(runs: Sequence[Run]) -> None:
    _table(
        (
            (
                r.id,
                r.job_id,
                r.state.value,
                r.attempt,
                _time(r.fire_at),
                _time(r.started_at),
                _time(r.ended_at),
                "-" if r.exit_code is None else r.exit_code,
                r.reason.value or "-",
            )
            for r in runs
        ),
        ["ID", "JOB", "STATE", "ATTEMPT", "FIRE AT", "STARTED", "ENDED", "EXIT", "REASON"],
    )


def _print_cluster(status: ClusterStatus) -> None:
    _fields(
        [
            ("mode", status.mode),
            ("leader", status.leader or "-"),
            ("epoch", status.epoch),
            ("members", ", ".join(status.members) or "-"),
        ]
    )
    click.echo()
    _table(
        (
            (
                w.id,
                w.address or "-",
                w.slots_used,
                max(0, w.slots_total - w.slots_used),
                ",".join(w.handlers) or "-",
                _labels(w.labels),
                ",".join(w.pollers) or "-",
                _time(w.connected_at),
            )
            for w in status.workers
        ),
        ["WORKER", "ADDRESS", "USED", "FREE", "HANDLERS", "LABELS", "POLLERS", "CONNECTED"],
    )
    click.echo()
    counts = Counter(s.owner or "(unowned)" for s in status.shards)
    lag: dict[str, float] = {}
    for s in status.shards:
        owner = s.owner or "(unowned)"
        lag[owner] = max(lag.get(owner, 0.0), s.lag_seconds)
    click.echo(f"{len(status.shards)} shards")
    _table(
        ((owner, n, f"{lag[owner]:.3f}s") for owner, n in sorted(counts.items())),
        ["POLLER", "SHARDS", "MAX LAG"],
    )


# --------------------------------------------------------------------------- group and state


@dataclass
class CliState:
    """The global options, and the client built from them on first use."""

    target: str
    owner: str
    json_output: bool
    timeout: float
    connect: Callable[..., Client] = Client
    _client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            self._client = self.connect(self.target, owner=self.owner, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def emit(self, value: Any, human: Callable[[], None]) -> None:
        """``value`` as one JSON document with --json, else whatever ``human`` prints."""
        if self.json_output:
            click.echo(json.dumps(to_jsonable(value), indent=2))
        else:
            human()


class ShardcronGroup(click.Group):
    """A group that turns ``ShardcronError`` from any subcommand into a one-line message
    on stderr and an exit code (``EXIT_CODES``, 1 otherwise)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ShardcronError as e:
            click.echo(f"error: {e.code}: {e.message}", err=True)
            ctx.exit(EXIT_CODES.get(e.code, 1))


@click.group(
    name="shardcron", cls=ShardcronGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--target",
    envvar="SHARDCRON_TARGET",
    default=DEFAULT_TARGET,
    show_default=True,
    help="host:port of any api node [env SHARDCRON_TARGET].",
)
@click.option(
    "--owner",
    envvar="SHARDCRON_OWNER",
    default=DEFAULT_OWNER,
    show_default=True,
    help="Owner (tenant) to act as [env SHARDCRON_OWNER].",
)
@click.option("--json", "json_output", is_flag=True, help="Print one JSON document.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds each call may take.",
)
@click.version_option(package_name="shardcron")
@click.pass_context
def cli(ctx: click.Context, target: str, owner: str, json_output: bool, timeout: float) -> None:
    """shardcron: a distributed job scheduler.
    \f
    An ``obj`` given to ``cli.main`` that is callable replaces ``Client`` as the client
    factory (tests pass a fake).
    """
    connect = ctx.obj if callable(ctx.obj) else Client
    ctx.obj = CliState(
        target=target, owner=owner, json_output=json_output, timeout=timeout, connect=connect
    )
    ctx.call_on_close(ctx.obj.close)


pass_state = click.make_pass_decorator(CliState)


# --------------------------------------------------------------------------- job


@cli.group()
def job() -> None:
    """Create, inspect and control jobs."""


@job.command("create")
@click.argument("name")
@_job_options
@click.option(
    "--idempotency-key",
    default="",
    metavar="KEY",
    help="A retried create with the same KEY returns the same job.",
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, metavar="[-- ARGV...]")
@pass_state
def job_create(
    state: CliState, name: str, argv: tuple[str, ...], idempotency_key: str, **options: Any
) -> None:
    """Create job NAME running ARGV (after --) or a --handler; print its id.

    No schedule option runs it once, now. Times are ISO 8601 (naive = UTC) or
    relative (now+30s); durations are 500ms, 30s, 5m, 1h30m, 2d.

    \b
    Example:
      shardcron job create report --cron '0 9 * * 1-5' --tz Europe/Berlin \\
          --max-attempts 3 --timeout 30s -- /usr/local/bin/report --daily
    """
    spec = spec_from_options(JobOptions(name=name, argv=argv, **options))
    created = state.client().create_job(spec, idempotency_key=idempotency_key)
    state.emit(created, lambda: click.echo(created.id))


@job.command("get")
@click.argument("job_id")
@pass_state
def job_get(state: CliState, job_id: str) -> None:
    """Show one job."""
    found = state.client().get_job(job_id)
    state.emit(found, lambda: _print_job(found))


@job.command("list")
@click.option("--state", "states", type=EnumChoice(JobState), multiple=True, help="Repeatable.")
@click.option("--name-prefix", default="", help="Only jobs whose name starts with P.")
@click.option("--label", "labels", type=KEY_VALUE, multiple=True, help="Only jobs with it.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--all", "all_pages", is_flag=True, help="Every job, however many.")
@pass_state
def job_list(
    state: CliState,
    states: tuple[JobState, ...],
    name_prefix: str,
    labels: tuple[tuple[str, str], ...],
    limit: int,
    all_pages: bool,
) -> None:
    """List jobs (all but DELETED unless --state is given)."""
    jobs = state.client().iter_jobs(
        states=states,
        name_prefix=name_prefix,
        labels=dict(labels),
        page_size=1000 if all_pages else min(limit + 1, 1000),
    )
    listed = list(jobs if all_pages else islice(jobs, limit + 1))
    more = not all_pages and len(listed) > limit
    listed = listed[:limit] if more else listed
    state.emit(listed, lambda: _print_jobs(listed))
    if more:
        click.echo(f"(first {limit} jobs shown: use --all or a larger --limit)", err=True)


@job.command("update")
@click.argument("job_id")
@click.option("--name", help="New name.")
@_job_options
@click.option(
    "--expected-version",
    type=click.IntRange(min=1),
    help="Fail unless the job is at this version [the version read].",
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, metavar="[-- ARGV...]")
@pass_state
def job_update(
    state: CliState,
    job_id: str,
    name: str | None,
    expected_version: int | None,
    argv: tuple[str, ...],
    **options: Any,
) -> None:
    """Change the options given (same flags as create; ARGV after -- replaces the command)."""
    opts = JobOptions(name=name, argv=argv, **options)
    if opts == JobOptions():
        raise _usage("nothing to change: give at least one option")
    client = state.client()
    current = client.get_job(job_id)
    spec = apply_options(current.spec, opts)
    updated = client.update_job(job_id, spec, expected_version=expected_version or current.version)
    state.emit(updated, lambda: click.echo(f"{updated.id} version {updated.version}"))


def _job_state_line(j: Job) -> None:
    click.echo(f"{j.id} {j.state.value} version {j.version}")


@job.command("pause")
@click.argument("job_id")
@pass_state
def job_pause(state: CliState, job_id: str) -> None:
    """Stop firing until resumed."""
    paused = state.client().pause_job(job_id)
    state.emit(paused, lambda: _job_state_line(paused))


@job.command("resume")
@click.argument("job_id")
@pass_state
def job_resume(state: CliState, job_id: str) -> None:
    """Fire again from the next fire on."""
    resumed = state.client().resume_job(job_id)
    state.emit(resumed, lambda: _job_state_line(resumed))


@job.command("run-now")
@click.argument("job_id")
@pass_state
def job_run_now(state: CliState, job_id: str) -> None:
    """Start one run now, outside the schedule; print its id."""
    run = state.client().run_job_now(job_id)
    state.emit(run, lambda: click.echo(run.id))


@job.command("delete")
@click.argument("job_id")
@click.option("--cancel-running", is_flag=True, help="Also cancel runs in progress.")
@pass_state
def job_delete(state: CliState, job_id: str, cancel_running: bool) -> None:
    """Delete a job: no further runs."""
    deleted = state.client().delete_job(job_id, cancel_running=cancel_running)
    state.emit(deleted, lambda: _job_state_line(deleted))


@job.command("preview")
@click.argument("job_id", required=False)
@_schedule_options
@click.option("--after", type=TIME, help="Fires after TIME [now].")
@click.option("--count", type=click.IntRange(1, 1000), default=10, show_default=True)
@pass_state
def job_preview(
    state: CliState,
    job_id: str | None,
    after: datetime | None,
    count: int,
    **schedule_options: Any,
) -> None:
    """The next fires of job ID, or of a --cron or --every schedule."""
    opts = JobOptions(**schedule_options)
    given = (("ID", job_id), ("--cron", opts.cron), ("--every", opts.every))
    sources = [name for name, v in given if v is not None]
    if len(sources) != 1:
        raise _usage("give exactly one of ID, --cron or --every")
    if job_id and opts != JobOptions():
        raise _usage("schedule options apply to a --cron or --every preview, not to a job ID")
    source = job_id or _schedule_from_options(Schedule.immediate(), opts)
    fires = state.client().preview_fires(source, count=count, after=after)
    state.emit(
        fires,
        lambda: _table(
            (
                (
                    f.local.isoformat(timespec="seconds"),
                    f.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    f.key,
                    f.skip_reason.value or "-",
                )
                for f in fires
            ),
            ["LOCAL", "UTC", "KEY", "SKIP"],
        ),
    )


# --------------------------------------------------------------------------- run


@cli.group()
def run() -> None:
    """Inspect runs, read their output, cancel them."""


@run.command("list")
@click.argument("job_id")
@click.option("--state", "states", type=EnumChoice(RunState), multiple=True, help="Repeatable.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@pass_state
def run_list(state: CliState, job_id: str, states: tuple[RunState, ...], limit: int) -> None:
    """The job's runs, newest first."""
    runs = list(
        islice(state.client().iter_runs(job_id, states=states, page_size=min(limit, 1000)), limit)
    )
    state.emit(runs, lambda: _print_runs(runs))


@run.command("get")
@click.argument("run_id")
@pass_state
def run_get(state: CliState, run_id: str) -> None:
    """Show one run."""
    found = state.client().get_run(run_id)
    state.emit(found, lambda: _print_run(found))


@run.command("cancel")
@click.argument("run_id")
@pass_state
def run_cancel(state: CliState, run_id: str) -> None:
    """Cancel a pending or running run."""
    cancelled = state.client().cancel_run(run_id)
    state.emit(cancelled, lambda: click.echo(f"{cancelled.id} {cancelled.state.value}"))


@run.command("logs")
@click.argument("run_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the run is final.")
@click.option("--offset", type=int, default=0, help="Start at byte N (negative: from the end).")
@pass_state
def run_logs(state: CliState, run_id: str, follow: bool, offset: int) -> None:
    """Write the run's output (stdout and stderr as kept) to stdout."""
    chunks = state.client().read_output(run_id, offset=offset, follow=follow)
    if state.json_output:
        state.emit(list(chunks), lambda: None)
        return
    try:
        for chunk in chunks:
            click.echo(chunk.data, nl=False)  # bytes go to the binary stdout as they are
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep the interpreter's
        # final flush of stdout from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise click.exceptions.Exit(0) from None


@run.command("wait")
@click.argument("run_id")
@click.option("--timeout", "wait_timeout", type=DURATION, help="Give up after DUR [never].")
@pass_state
def run_wait(state: CliState, run_id: str, wait_timeout: timedelta | None) -> None:
    """Wait until the run is final; exit 0 if it SUCCEEDED, 1 otherwise."""
    seconds = None if wait_timeout is None else wait_timeout.total_seconds()
    try:
        final = state.client().wait_run(run_id, timeout=seconds)
    except TimeoutError as e:
        click.echo(f"error: DEADLINE_EXCEEDED: {e}", err=True)
        raise click.exceptions.Exit(1) from None
    state.emit(final, lambda: click.echo(f"{final.id} {final.state.value}"))
    raise click.exceptions.Exit(0 if final.state is RunState.SUCCEEDED else 1)


# --------------------------------------------------------------------------- dead letters


@cli.group("dead-letters")
def dead_letters() -> None:
    """Runs that failed with no attempt left: list, replay, drop."""


@dead_letters.command("list")
@click.option("--job", "job_id", default="", help="Only this job's.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@pass_state
def dead_letters_list(state: CliState, job_id: str, limit: int) -> None:
    """List dead letters, newest first."""
    page = state.client().list_dead_letters(job_id=job_id, page_size=limit)
    state.emit(page.items, lambda: _print_runs(page.items))


def _dead_letter_targets(job_id: str, run_ids: tuple[str, ...]) -> dict[str, Any]:
    if bool(job_id) == bool(run_ids):
        raise _usage("give either --job JOB_ID or RUN_IDs")
    return {"job_id": job_id, "run_ids": run_ids}


@dead_letters.command("replay")
@click.option("--job", "job_id", default="", help="Every dead letter of this job.")
@click.argument("run_ids", nargs=-1)
@pass_state
def dead_letters_replay(state: CliState, job_id: str, run_ids: tuple[str, ...]) -> None:
    """Start a new run for each dead letter; print the new runs."""
    targets = _dead_letter_targets(job_id, run_ids)
    runs = state.client().replay_dead_letters(**targets)
    state.emit(runs, lambda: _print_runs(runs))


@dead_letters.command("drop")
@click.option("--job", "job_id", default="", help="Every dead letter of this job.")
@click.argument("run_ids", nargs=-1)
@pass_state
def dead_letters_drop(state: CliState, job_id: str, run_ids: tuple[str, ...]) -> None:
    """Forget dead letters; print how many."""
    targets = _dead_letter_targets(job_id, run_ids)
    dropped = state.client().drop_dead_letters(**targets)
    state.emit({"dropped": dropped}, lambda: click.echo(f"dropped {dropped}"))


# --------------------------------------------------------------------------- cluster


@cli.group()
def cluster() -> None:
    """The cluster: leader, members, workers, shards."""


@cluster.command("status")
@pass_state
def cluster_status(state: CliState) -> None:
    """Leader, epoch, members, workers (slots used/free) and the shard map."""
    status = state.client().cluster_status()
    state.emit(status, lambda: _print_cluster(status))
