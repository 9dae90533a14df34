"""What the commands print: one JSON document with ``--json``, aligned text for people.

``to_jsonable`` is the JSON shape of every domain value (dataclasses as objects, times
as ISO strings, durations as seconds, bytes as base64, enums by value). The ``print_*``
functions write one job, run, list or cluster status as a table (columns two spaces
apart) or as ``name  value`` lines; times are shown in the local zone.
"""

from __future__ import annotations

import base64
import dataclasses
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import click

from shardcron.client.schedule import format_duration
from shardcron.client.types import (
    ClusterStatus,
    CommandTask,
    DstGap,
    DstOverlap,
    Fire,
    Job,
    Run,
    Schedule,
    ScheduleKind,
    Task,
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


def print_table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> None:
    """Print ``rows`` under ``headers`` in left-aligned columns two spaces apart."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


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


def print_job(job: Job) -> None:
    """Every setting of one job as aligned ``name  value`` lines."""
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
        pairs += [("env", _labels(spec.task.env))]
        if spec.task.secret_env:  # the server shows keys only; never print a value
            pairs += [("secret env", ", ".join(f"{k}=***" for k in sorted(spec.task.secret_env)))]
        pairs += [("cwd", spec.task.cwd or "-")]
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
    print_fields(pairs)


def print_job_state(job: Job) -> None:
    """One line: the job id, its state and version (pause, resume, delete)."""
    click.echo(f"{job.id} {job.state.value} version {job.version}")


def print_jobs(jobs: Sequence[Job]) -> None:
    """One row per job: id, name, state, schedule, next fire, version."""
    print_table(
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


def print_run(run: Run) -> None:
    """Everything about one run as aligned ``name  value`` lines."""
    print_fields(
        [
            ("id", run.id),
            ("job", run.job_id),
            ("state", run.state.value),
            ("reason", run.reason.value or "-"),
            ("waiting", run.waiting_reason or "-"),
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


def print_runs(runs: Sequence[Run]) -> None:
    """One row per run: ids, state, attempt, times, exit code and reason (for a run
    due and not yet leased, why it waits)."""
    print_table(
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
                r.reason.value or r.waiting_reason or "-",
            )
            for r in runs
        ),
        ["ID", "JOB", "STATE", "ATTEMPT", "FIRE AT", "STARTED", "ENDED", "EXIT", "REASON"],
    )


def print_cluster(status: ClusterStatus) -> None:
    """The leader and members, a table of workers, and shards counted by poller."""
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
    print_table(
        ((owner, n, f"{lag[owner]:.3f}s") for owner, n in sorted(counts.items())),
        ["POLLER", "SHARDS", "MAX LAG"],
    )
