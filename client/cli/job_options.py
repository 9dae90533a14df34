"""The job flags of ``job create``, ``job update`` and ``job preview``, and the spec they make.

The flags are declared once: ``job_flags`` (every job flag, the schedule flags and the
command after ``--``) and ``schedule_flags`` (the cron and interval flags a preview
takes). Both hand the command one ``options: JobOptions`` argument instead of thirty
keywords, and ``apply_options`` is the one function that turns those options into a new
spec (create) or into the changes to an existing one (update). A flag that is not given
leaves the value as it is; a rule that spans flags raises ``click.UsageError`` naming
them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click

from shardcron.client import limits
from shardcron.client.cli.params import (
    DURATION,
    ENV_FILE,
    KEY_VALUE,
    PAYLOAD,
    SECRET_KEY_VALUE,
    TIME,
    EnumChoice,
    usage_error,
)
from shardcron.client.types import (
    CommandTask,
    DstGap,
    DstOverlap,
    HandlerTask,
    JobSpec,
    MisfirePolicy,
    NotifyPolicy,
    OverlapPolicy,
    ResultLimits,
    Schedule,
    ScheduleKind,
    Task,
)

D = TypeVar("D")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """The job flags of ``job create``, ``job update`` and ``job preview``; None or empty = not
    given."""

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
    pids_limit: int | None = None
    output_limit: int | None = None
    result_files: int | None = None
    result_file_bytes: int | None = None
    result_bytes: int | None = None
    require_labels: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    pause_after_failures: int | None = None
    notify_webhook: str | None = None  # "" = no notifications
    notify_on: dict[str, Any] | None = None  # NotifyPolicy's rule fields (``notify_rules``)
    notify_slack: bool | None = None
    handler: str | None = None
    payload: bytes | None = None
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, str], ...] = ()
    secret_env_files: tuple[tuple[tuple[str, str], ...], ...] = ()
    cwd: str | None = None
    # --artifact: the archive's path, uploaded by the command once the spec is made
    # (``with_artifact``), so that a usage error never sends it
    artifact: str | None = None


def with_artifact(spec: JobSpec, options: JobOptions, upload: Callable[[str], str]) -> JobSpec:
    """``spec`` naming the --artifact file of ``options``, uploaded by ``upload(path)``,
    which answers its sha256 (a --handler task with --artifact is refused earlier)."""
    if options.artifact is None or not isinstance(spec.task, CommandTask):
        return spec
    return spec.replace(task=dataclasses.replace(spec.task, artifact=upload(options.artifact)))


# --------------------------------------------------------------------------- the flags

# --cron/--tz/--dst-gap/--dst-overlap/--every/--anchor: create, update and preview.
SCHEDULE_FLAGS = [
    click.option("--cron", metavar="EXPR", help="Cron: 5 fields, or 6 with seconds last."),
    click.option("--tz", metavar="ZONE", help="IANA zone the cron is read in [UTC]."),
    click.option(
        "--dst-gap",
        type=EnumChoice(DstGap),
        help="Cron time missing on spring-forward: fire after the gap (shift, default) or skip.",
    ),
    click.option(
        "--dst-overlap",
        type=EnumChoice(DstOverlap),
        help="Cron time repeated on fall-back: fire once (first, default) or both.",
    ),
    click.option("--every", type=DURATION, help="Fire every DURATION (e.g. 5m, 1h30m)."),
    click.option("--anchor", type=TIME, help="With --every: fire at ANCHOR + k*DURATION."),
]

# The rest of the job flags but NAME (an argument of create, --name of update).
JOB_FLAGS = [
    click.option("--at", type=TIME, help="Run once at TIME (ISO 8601, naive = UTC; now+30s)."),
    click.option("--start-at", type=TIME, help="No fire before TIME."),
    click.option("--end-at", type=TIME, help="No fire after TIME."),
    click.option("--jitter", type=DURATION, help="Delay each fire by a stable random 0..DUR."),
    click.option(
        "--priority",
        type=click.IntRange(-limits.MAX_PRIORITY, limits.MAX_PRIORITY),
        help="Higher runs first when slots are scarce.",
    ),
    click.option(
        "--max-attempts",
        type=click.IntRange(1, limits.MAX_ATTEMPTS),
        help="Total attempts (1 = no retry) [3].",
    ),
    click.option("--backoff", type=DURATION, help="Delay before the first retry [1s]."),
    click.option(
        "--backoff-multiplier",
        type=click.FloatRange(1, limits.MAX_MULTIPLIER),
        help="Backoff growth per attempt [2].",
    ),
    click.option("--max-backoff", type=DURATION, help="Longest delay between attempts [5m]."),
    click.option("--timeout", type=DURATION, help="Kill a run after DUR (0 = no timeout)."),
    click.option(
        "--max-concurrent",
        type=click.IntRange(0, limits.MAX_CONCURRENT),
        help="Runs of this job at once.",
    ),
    click.option("--overlap", type=EnumChoice(OverlapPolicy), help="A fire while a run is going."),
    click.option(
        "--misfire", type=EnumChoice(MisfirePolicy), help="Fires missed while down [run-once]."
    ),
    click.option(
        "--starting-deadline", type=DURATION, help="A run not started within DUR is MISSED."
    ),
    click.option(
        "--slots", type=click.IntRange(1, limits.MAX_SLOTS), help="Worker slots a run takes [1]."
    ),
    click.option(
        "--cpu",
        type=click.IntRange(0, limits.MAX_CPU_MILLIS),
        help="CPU a run needs, in millicores.",
    ),
    click.option(
        "--memory", type=click.IntRange(0, limits.MAX_MEMORY_MB), help="Memory a run needs, in MB."
    ),
    click.option(
        "--pids-limit",
        type=click.IntRange(0, limits.MAX_PIDS_LIMIT),
        help=f"Processes a command's run may have at once [{limits.DEFAULT_PIDS_LIMIT}].",
    ),
    click.option(
        "--output-limit",
        type=click.IntRange(0, limits.MAX_OUTPUT_LIMIT),
        help="Bytes of a run's output kept whole; the rest is cut, and said [the node's].",
    ),
    click.option(
        "--result-files",
        type=click.IntRange(0, limits.MAX_RESULT_FILES),
        help=f"Result files a run keeps; the rest are left out, and said "
        f"[{limits.MAX_RESULT_FILES}].",
    ),
    click.option(
        "--result-file-bytes",
        type=click.IntRange(0, limits.MAX_RESULT_FILE_BYTES),
        help=f"Bytes one result file may hold [{limits.MAX_RESULT_FILE_BYTES}].",
    ),
    click.option(
        "--result-bytes",
        type=click.IntRange(0, limits.MAX_RESULT_BYTES),
        help=f"Bytes a run's result files may hold together [{limits.MAX_RESULT_BYTES}].",
    ),
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
        type=click.IntRange(0, limits.MAX_PAUSE_AFTER_FAILURES),
        help="Pause the job after N failed runs in a row (0 = never).",
    ),
    click.option(
        "--notify-webhook",
        metavar="URL",
        help="POST a signed JSON notification here when a --notify-on rule matches a run's"
        " end ('' = no notifications).",
    ),
    click.option(
        "--notify-on",
        metavar="RULES",
        callback=lambda _ctx, _param, value: None if value is None else notify_rules(value),
        help="When to notify, comma-separated: failure, recovery, dead-letter, missed,"
        " consecutive=N, late=DURATION.",
    ),
    click.option(
        "--notify-slack/--no-notify-slack",
        default=None,
        help='Send a Slack-compatible body ({"text": ...}) instead of the JSON record.',
    ),
    click.option("--handler", metavar="NAME", help="Run the worker handler NAME (no ARGV)."),
    click.option("--payload", type=PAYLOAD, help="Handler payload: TEXT or @FILE."),
    click.option("--env", type=KEY_VALUE, multiple=True, help="Command environment (repeatable)."),
    click.option(
        "--secret-env",
        type=SECRET_KEY_VALUE,
        multiple=True,
        help="Command environment never shown back (repeatable); KEY= removes it on update.",
    ),
    click.option(
        "--secret-env-file",
        "secret_env_files",
        type=ENV_FILE,
        multiple=True,
        help="Secret environment from a file of KEY=VALUE lines (keeps values off the command line).",
    ),
    click.option("--cwd", metavar="DIR", help="Command working directory."),
    click.option(
        "--artifact",
        metavar="FILE",
        type=click.Path(exists=True, dir_okay=False),
        help="A tar or tar.gz of the job's code: uploaded (once: stored by its sha256), "
        "unpacked into the run's directory, where the command runs unless --cwd says.",
    ),
]

COMMAND_ARGV = click.argument("argv", nargs=-1, type=click.UNPROCESSED, metavar="[-- ARGV...]")

_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(JobOptions))


def job_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    """Declares every job flag and the command after ``--`` (create and update), and hands
    ``f`` the flags given as one ``options: JobOptions`` (with ``name`` if the command
    declares it)."""
    return _declare(f, [*SCHEDULE_FLAGS, *JOB_FLAGS, COMMAND_ARGV])


def schedule_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    """Declares the cron and interval flags (preview) and hands ``f`` one ``options:
    JobOptions`` holding them."""
    return _declare(f, SCHEDULE_FLAGS)


def _declare(f: Callable[..., Any], flags: list[Callable[..., Any]]) -> Callable[..., Any]:
    @functools.wraps(f)
    def gathering(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in list(kwargs) if name in _OPTION_FIELDS}
        return f(*args, options=JobOptions(**given), **kwargs)

    # Decorators apply bottom-up: applied last-first, the flags are listed as written.
    for flag in reversed(flags):
        gathering = flag(gathering)
    return gathering


# --------------------------------------------------------------------------- options -> JobSpec


def spec_from_options(options: JobOptions) -> JobSpec:
    """The spec ``job create`` sends: no schedule flag = immediate; the task is the argv
    or the handler (exactly one). Raises click.UsageError naming the offending option."""
    return apply_options(None, options)


def apply_options(spec: JobSpec | None, o: JobOptions) -> JobSpec:
    """``spec`` with the options given in ``o`` changed (``job update``); None builds a
    new spec (``job create``). Raises click.UsageError naming the offending option."""
    task = _task_from_options(spec.task if spec else None, o)
    schedule = schedule_from_options(spec.schedule if spec else Schedule.immediate(), o)
    if spec is None:
        if not o.name:
            raise usage_error("a job needs a NAME")
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
        pids_limit=o.pids_limit,
        output_limit_bytes=o.output_limit,
        labels=dict(o.require_labels) if o.require_labels else None,
        results=_results_given(spec.resources.results, o),
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
    spec = spec.replace(notify=_notify_from_options(spec.notify, o))
    if o.timeout is not None:
        spec = spec.replace(timeout=o.timeout or None)
    if o.starting_deadline is not None:
        spec = spec.replace(starting_deadline=o.starting_deadline or None)
    return spec


def _results_given(results: ResultLimits, o: JobOptions) -> ResultLimits | None:
    """The result file bounds with the flags given, None when none is."""
    changed = _given(
        results,
        max_files=o.result_files,
        max_file_bytes=o.result_file_bytes,
        max_bytes=o.result_bytes,
    )
    return None if changed is results else changed


_NO_RULES = {
    "on_failure": False,
    "on_recovery": False,
    "on_dead_letter": False,
    "on_missed": False,
    "on_consecutive_failures": 0,
    "on_late": None,
}


def notify_rules(text: str) -> dict[str, Any]:
    """``--notify-on``'s rules as ``NotifyPolicy`` fields (every rule not named off)."""
    rules = dict(_NO_RULES)
    flags = {"failure": "on_failure", "recovery": "on_recovery", "dead-letter": "on_dead_letter"}
    flags["missed"] = "on_missed"
    for word in (w.strip() for w in text.split(",")):
        name, eq, value = word.partition("=")
        if not eq and name in flags:
            rules[flags[name]] = True
        elif name == "consecutive" and eq and value.isdigit() and 0 < int(value) <= 1_000_000:
            rules["on_consecutive_failures"] = int(value)
        elif name == "late" and eq:
            try:
                rules["on_late"] = DURATION.convert(value, None, None)
            except click.BadParameter as e:
                raise click.BadParameter(f"late={value}: {e.message}") from None
        elif word:
            raise click.BadParameter(
                f"unknown rule {word!r:.40}: use failure, recovery, dead-letter, missed,"
                " consecutive=N, late=DURATION"
            )
    return rules


def _notify_from_options(current: NotifyPolicy | None, o: JobOptions) -> NotifyPolicy | None:
    if o.notify_webhook == "":
        return None
    if current is None:
        if o.notify_webhook is None:
            if o.notify_on is not None or o.notify_slack is not None:
                raise usage_error("--notify-on and --notify-slack need --notify-webhook")
            return None
        if o.notify_on is None:
            raise usage_error("--notify-webhook needs --notify-on")
        current = NotifyPolicy(webhook_url=o.notify_webhook)
    changed = _given(current, webhook_url=o.notify_webhook, slack=o.notify_slack)
    return changed if o.notify_on is None else dataclasses.replace(changed, **o.notify_on)


def _given(obj: D, **changes: Any) -> D:
    """``obj`` with the changes that are not None."""
    given = {k: v for k, v in changes.items() if v is not None}
    return dataclasses.replace(obj, **given) if given else obj  # type: ignore[type-var]


def _task_from_options(current: Task | None, o: JobOptions) -> Task:
    if o.argv and o.handler is not None:
        raise usage_error("give either a command after -- or --handler, not both")
    secrets = {k: v for pairs in (*o.secret_env_files, o.secret_env) for k, v in pairs}
    if o.handler is not None or (not o.argv and isinstance(current, HandlerTask)):
        if o.env or o.cwd is not None or secrets or o.artifact is not None:
            raise usage_error(
                "--env, --secret-env, --cwd and --artifact apply to a command, "
                "not to a --handler task"
            )
        base = current if isinstance(current, HandlerTask) else HandlerTask(name=o.handler or "")
        return _given(base, name=o.handler, payload=o.payload)
    if o.payload is not None:
        raise usage_error("--payload needs --handler")
    env = dict(o.env) if o.env else None
    if o.argv:
        base_cmd = current if isinstance(current, CommandTask) else CommandTask(argv=o.argv)
    elif isinstance(current, CommandTask):
        base_cmd = current
    else:
        raise usage_error("give the command to run after --, or --handler NAME")
    # an update sends back the placeholders it read (kept) with the keys given here
    secret_env = {**base_cmd.secret_env, **secrets} if secrets else None
    return _given(
        base_cmd,
        argv=tuple(o.argv) or None,
        env=env,
        cwd=o.cwd,
        secret_env=secret_env,
    )


def schedule_from_options(current: Schedule, o: JobOptions) -> Schedule:
    """``current`` with the schedule flags given in ``o`` applied: --cron, --at or --every
    (at most one) switches the kind and keeps the window; the other flags must fit the
    kind. Raises click.UsageError naming the offending flag."""
    given = (("--cron", o.cron), ("--at", o.at), ("--every", o.every))
    kinds = [flag for flag, v in given if v is not None]
    if len(kinds) > 1:
        raise usage_error(f"{' and '.join(kinds)} cannot be combined: a job has one schedule")
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
            raise usage_error(f"{flag} applies to a --cron schedule only")
    if o.anchor is not None and s.kind is not ScheduleKind.INTERVAL:
        raise usage_error("--anchor applies to an --every schedule only")
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
