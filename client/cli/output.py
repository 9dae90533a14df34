"""What the commands print: one JSON document with ``--json``, aligned text for people.

``to_jsonable`` is the JSON shape of every domain value (dataclasses as objects, times
as ISO strings, durations as seconds, bytes as base64, enums by value). The ``print_*``
functions write one job, run, list or cluster status as a table (columns two spaces
apart, at most ``TABLE_WIDTH`` wide: the columns of free text are cut to fit) or as
``name  value`` lines. Times of runs and jobs are shown through a ``times.TimeView``
(a cron job's zone, else local time, or UTC), the rest in the local zone.
"""

from __future__ import annotations

import base64
import dataclasses
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import click

from shardcron.client.cli.health import rate_text, strip
from shardcron.client.cli.times import TimeView, took, view
from shardcron.client.schedule import format_duration
from shardcron.client.types import (
    ClusterStatus,
    CommandTask,
    DstGap,
    DstOverlap,
    Fire,
    Job,
    NotifyPolicy,
    Run,
    RunLateness,
    RunState,
    RunUsage,
    Schedule,
    ScheduleKind,
    Task,
    WorkerInfo,
)


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


TABLE_WIDTH = 120  # columns a table may take
_CUT_TO = 8  # a column cut to fit keeps at least this many characters


def print_table(
    rows: Iterable[Sequence[Any]], headers: Sequence[str], *, cut: Sequence[int] = ()
) -> None:
    """Print ``rows`` under ``headers`` in left-aligned columns two spaces apart. While the
    table is wider than ``TABLE_WIDTH``, the widest of the columns ``cut`` (their
    indexes) is narrowed, its long cells ending in "…"."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    over = sum(widths) + 2 * (len(widths) - 1) - TABLE_WIDTH
    while over > 0 and cut:
        widest = max(cut, key=lambda i: widths[i])
        floor = max(_CUT_TO, len(headers[widest]))
        if widths[widest] <= floor:
            break
        narrower = max(floor, widths[widest] - over)
        over -= widths[widest] - narrower
        widths[widest] = narrower
    for row in cells:
        fitted = (c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(row, widths, strict=True))
        click.echo("  ".join(c.ljust(w) for c, w in zip(fitted, widths, strict=True)).rstrip())


def print_fields(pairs: Iterable[tuple[str, Any]]) -> None:
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


def print_job(job: Job, last: Run | None = None, *, utc: bool = False) -> None:
    """Every setting of one job as aligned ``name  value`` lines, with its ``last`` run's
    outcome; times in the job's zone (``times.view``)."""
    spec = job.spec
    tv = view(spec.schedule, utc=utc)
    r, c, res = spec.retry, spec.concurrency, spec.resources
    pairs: list[tuple[str, Any]] = [
        ("id", job.id),
        ("name", spec.name),
        ("owner", job.owner),
        ("state", job.state.value + (f" ({job.pause_reason})" if job.pause_reason else "")),
        ("last run", _outcome_text(last, tv)),
        ("version", job.version),
        ("schedule", _schedule_text(spec.schedule)),
        ("task", _task_text(spec.task)),
    ]
    if isinstance(spec.task, CommandTask):
        pairs += [("env", _labels(spec.task.env))]
        if spec.task.secret_env:  # the server shows keys only; never print a value
            pairs += [("secret env", ", ".join(f"{k}=***" for k in sorted(spec.task.secret_env)))]
        pairs += [("cwd", spec.task.cwd or "-")]
        if spec.task.artifact:
            pairs += [("artifact", spec.task.artifact)]
    pairs += [
        ("next fire", tv.when(job.next_fire_at, with_zone=True)),
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
            f"{res.pids_limit or 'default'} pids, worker labels {_labels(res.labels)}",
        ),
        (
            "pause after",
            f"{spec.pause_after_failures} failures" if spec.pause_after_failures else "-",
        ),
        ("failures in a row", job.consecutive_failures),
        ("notify", _notify_text(spec.notify)),
        ("labels", _labels(spec.labels)),
        ("idempotency key", job.idempotency_key or "-"),
        ("created", tv.when(job.created_at, with_zone=True)),
        ("updated", tv.when(job.updated_at, with_zone=True)),
    ]
    print_fields(pairs)


def _notify_text(n: NotifyPolicy | None) -> str:
    """``failure,late=30s -> https://hooks.example/x``, or ``-`` (the owner's defaults)."""
    if n is None:
        return "-"
    return f"{','.join(n.rules)}{' (slack)' if n.slack else ''} -> {n.webhook_url}"


def _outcome_text(run: Run | None, tv: TimeView) -> str:
    """``FAILED (NON_ZERO_EXIT, exit 3) 2026-11-26 15:00:10 CET, run ID``, or ``-``."""
    if run is None:
        return "-"
    details = [d for d in (run.reason.value, _exit_text(run)) if d]
    text = run.state.value + (f" ({', '.join(details)})" if details else "")
    when = run.ended_at or run.started_at
    return f"{text} {tv.when(when, with_zone=True)}, run {run.id}"


def _exit_text(run: Run) -> str:
    return "" if run.exit_code is None else f"exit {run.exit_code}"


def print_job_state(job: Job) -> None:
    """One line: the job id, its state and version (pause, resume, delete)."""
    click.echo(f"{job.id} {job.state.value} version {job.version}")


def print_jobs(
    jobs: Sequence[Job],
    last: Mapping[str, RunState | None] | None = None,
    *,
    utc: bool = False,
    unicode: bool = True,
) -> None:
    """One row per job: id, name, state, its last run's state (``last`` by job id), its
    recent runs as a strip and its success rate (``Job.health``, when read: ``health``),
    schedule, and next fire in the job's zone (``times.view``)."""
    last = last or {}
    print_table(
        (
            (
                j.id,
                j.spec.name,
                j.state.value,
                done.value if (done := last.get(j.id)) else "-",
                (strip(j.health, unicode=unicode) or "-") if j.health else "-",
                rate_text(j.health) if j.health else "-",
                _schedule_brief(j.spec.schedule),
                view(j.spec.schedule, utc=utc).when(j.next_fire_at, with_zone=True, short=True),
            )
            for j in jobs
        ),
        ["JOB ID", "NAME", "STATE", "LAST RUN", "RECENT RUNS", "SUCCESS", "SCHEDULE", "NEXT FIRE"],
        cut=(1, 6),
    )


def _schedule_brief(s: Schedule) -> str:
    """The schedule in a few words: its zone shows in the next fire beside it."""
    if s.kind is ScheduleKind.CRON:
        return f"cron {s.cron}"
    if s.kind is ScheduleKind.INTERVAL:
        return f"every {_duration(s.interval)}"
    if s.kind is ScheduleKind.AT:
        return "at " + view(s, utc=False).when(s.at)
    return "now"


def print_fires(fires: Sequence[Fire]) -> None:
    """A preview: each fire in the schedule's zone and in UTC, its key and any skip."""
    print_table(
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
    )


def print_run(run: Run, tv: TimeView) -> None:
    """Everything about one run as aligned ``name  value`` lines, times through ``tv`` to
    the millisecond. A lease shows only while the run holds one (LEASED, RUNNING)."""

    def at(dt: datetime | None) -> str:
        return "-" if dt is None else f"{tv.precise(dt)} {dt.astimezone(tv.zone).tzname()}"

    pairs: list[tuple[str, Any]] = [
        ("id", run.id),
        ("job", run.job_id),
        ("state", run.state.value),
        ("reason", run.reason.value or "-"),
        ("waiting", run.waiting_reason or "-"),
        ("late", lateness_text(run.lateness)),
        ("error", run.error or "-"),
        ("attempt", run.attempt),
        ("fire", f"{at(run.fire_at)} ({run.fire_key})"),
        ("due", at(run.due_at)),
        ("started", at(run.started_at)),
        ("ended", at(run.ended_at)),
        ("took", took(run.started_at, run.ended_at)),
        ("exit code", "-" if run.exit_code is None else run.exit_code),
        ("worker", run.worker_id or "-"),
    ]
    if run.state in (RunState.LEASED, RunState.RUNNING):
        pairs.append(("lease", f"token {run.lease_token} until {at(run.lease_expires_at)}"))
    pairs += [
        ("used", usage_text(run.usage)),
        ("output", f"{run.output_bytes} bytes"),
        ("output sha256", run.output_sha256 or "-"),
        ("truncated", run.output_truncated or "-"),
        ("results", results_text(run)),
        ("priority", run.priority),
        ("shard", run.shard),
        ("replayed from", run.replayed_from or "-"),
        ("dead letter", "yes" if run.dead_letter else "no"),
    ]
    print_fields(pairs)


def lateness_text(lateness: RunLateness | None) -> str:
    """Why a run was leased late, skipped or missed, as ``run get`` shows it: the
    poller's words, then its code."""
    if lateness is None:
        return "-"
    return f"{lateness.text} [{lateness.reason.value}]"


def _reason_cell(run: Run) -> str:
    """``run list``'s REASON: the run's reason (or why it waits, or its error), and
    ``late: CODE`` when it was late for a reason the first does not say already."""
    said = run.reason.value or run.waiting_reason or run.error
    late = run.lateness
    if late is None or late.reason.value == said:
        return said or "-"
    marker = f"late: {late.reason.value}"
    return f"{said}, {marker}" if said else marker


def results_text(run: Run) -> str:
    """A run's result files, as ``run get`` shows them (``run results`` lists them)."""
    text = f"{len(run.results)} files" if run.results else "-"
    return f"{text} ({run.results_note})" if run.results_note else text


def print_results(run: Run) -> None:
    """A run's result files as ``run results`` lists them, and what was left out."""
    print_table(((f.name, f.size, f.sha256) for f in run.results), ["NAME", "SIZE", "SHA256"])
    if run.results_note:
        click.echo(f"left out: {run.results_note}", err=True)


def usage_text(usage: RunUsage | None) -> str:
    """What a run's command used, as ``run get`` shows it."""
    if usage is None:
        return "-"
    text = f"peak memory {_bytes(usage.peak_memory_bytes)}, CPU {usage.cpu_seconds:.3f}s"
    return text if usage.limits_enforced else f"{text} (limits not enforced on its worker)"


def _bytes(n: int) -> str:
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def print_runs(runs: Sequence[Run], tv: TimeView) -> None:
    """One row per run of one job: id, state, attempt, fire time, start (to the
    millisecond), how long it took, exit code and reason (for a run due and not yet
    leased, why it waits); times through ``tv``, whose zone the header names."""
    print_table(
        (
            (
                r.id,
                r.state.value,
                r.attempt,
                tv.when(r.fire_at, short=True),
                tv.precise(r.started_at, day_of=r.fire_at),
                took(r.started_at, r.ended_at),
                "-" if r.exit_code is None else r.exit_code,
                _reason_cell(r),
            )
            for r in runs
        ),
        ["RUN ID", "STATE", "TRY", f"FIRE ({tv.label})", "STARTED", "TOOK", "EXIT", "REASON"],
        cut=(7,),
    )


def print_runs_by_job(runs: Sequence[Run], *, utc: bool) -> None:
    """Runs of several jobs (dead letters, `run list` with no job): a ``job ID`` line, then
    that job's runs."""
    by_job: dict[str, list[Run]] = {}
    for r in runs:
        by_job.setdefault(r.job_id, []).append(r)
    for i, (job_id, of_job) in enumerate(by_job.items()):
        if i:
            click.echo()
        click.echo(f"job {job_id}")
        print_runs(of_job, view(None, utc=utc))


def _handlers(worker: WorkerInfo) -> str:
    names = ",".join(worker.handlers) or "-"
    return f"{names} (+{worker.handlers_omitted} more)" if worker.handlers_omitted else names


def print_cluster(status: ClusterStatus) -> None:
    """The leader and members, a table of workers (and how many more the node left out
    of its reply), and shards counted by poller."""
    print_fields(
        [
            ("mode", status.mode),
            ("leader", status.leader or "-"),
            ("epoch", status.epoch),
            ("members", ", ".join(status.members) or "-"),
        ]
    )
    click.echo()
    print_table(
        (
            (
                w.id,
                w.address or "-",
                w.slots_used,
                max(0, w.slots_total - w.slots_used),
                _handlers(w),
                _labels(w.labels),
                ",".join(w.owners) or "-",
                ",".join(w.pollers) or "-",
                _time(w.connected_at),
            )
            for w in status.workers
        ),
        [
            "WORKER",
            "ADDRESS",
            "USED",
            "FREE",
            "HANDLERS",
            "LABELS",
            "POOL",
            "POLLERS",
            "CONNECTED",
        ],
    )
    if status.workers_omitted:
        click.echo(f"… and {status.workers_omitted} more workers")
    click.echo()
    counts = Counter(s.owner or "(unowned)" for s in status.shards)
    lag: dict[str, float] = {}
    for s in status.shards:
        owner = s.owner or "(unowned)"
        lag[owner] = max(lag.get(owner, 0.0), s.lag_seconds)
    click.echo(f"{len(status.shards)} shards")
    print_table(
        ((owner, n, f"{lag[owner]:.3f}s") for owner, n in sorted(counts.items())),
        ["POLLER", "SHARDS", "MAX LAG"],
    )
