"""``shardcron job ...``: create, list, show, change, pause, resume, run, delete and preview
jobs.

``create`` and ``update`` take the same flags (``job_flags``) and build the spec with the
same function (``apply_options``): create from nothing, update from the job as read, sent
back with the version read so that a concurrent change fails instead of being lost.
``create`` prints the job's id, its first run's id and, for a schedule, its next three
fires (``update`` prints them too when it changes the schedule), so a misread cron
expression shows at once; ``create --wait`` then follows the first run through its
retries and exits 0 only if it SUCCEEDED. ``list`` and ``get`` show each job's last run
beside its state; ``list`` its last runs and success rate too (``health``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import islice
from typing import Any

import click

from shardcron.client import limits
from shardcron.client.cli.health import health_json, speaks_utf8
from shardcron.client.cli.job_options import (
    JobOptions,
    apply_options,
    job_flags,
    schedule_flags,
    schedule_from_options,
    spec_from_options,
    with_artifact,
)
from shardcron.client.cli.lookups import first_run, last_outcomes, latest_run
from shardcron.client.cli.output import (
    print_fields,
    print_fires,
    print_job,
    print_job_state,
    print_jobs,
    to_jsonable,
)
from shardcron.client.cli.params import DURATION, KEY_VALUE, TIME, EnumChoice, usage_error
from shardcron.client.cli.state import CliState, pass_state
from shardcron.client.cli.times import view
from shardcron.client.cli.waiting import exit_for, wait_and_exit, wait_for
from shardcron.client.errors import NotFound
from shardcron.client.types import Fire, Job, JobState, Run, RunState, Schedule, ScheduleKind

NEXT_FIRES = 3  # fires job create and update print, so a misread schedule shows at once


@click.group()
def job() -> None:
    """Create, inspect and control jobs."""


@job.command("create")
@click.argument("name")
@job_flags
@click.option(
    "--idempotency-key",
    default="",
    metavar="KEY",
    help="A retried create with the same KEY returns the same job.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the job id.")
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the first run (and its retries) to its end; exit 0 only if it SUCCEEDED.",
)
@click.option(
    "--wait-timeout", type=DURATION, help="With --wait: give up after DUR (exit 1) [never]."
)
@pass_state
def job_create(
    state: CliState,
    idempotency_key: str,
    quiet: bool,
    wait: bool,
    wait_timeout: timedelta | None,
    options: JobOptions,
) -> None:
    """Create job NAME running ARGV (after --) or a --handler; print its id, its first
    run's id and its next fires.

    No schedule option runs it once, now. Times are ISO 8601 (naive = UTC) or
    relative (now+30s); durations are 500ms, 30s, 5m, 1h30m, 2d. Failed runs are
    tried 3 times in all unless --max-attempts says otherwise.

    \b
    Example:
      shardcron job create report --cron '0 9 * * 1-5' --tz Europe/Berlin \\
          --max-attempts 3 --timeout 30s -- /usr/local/bin/report --daily
    """
    if wait_timeout is not None and not wait:
        raise usage_error("--wait-timeout goes with --wait")
    spec = spec_from_options(options)
    client = state.client()
    spec = with_artifact(spec, options, lambda path: client.upload_artifact(path))
    created = client.create_job(spec, idempotency_key=idempotency_key)
    if quiet and not state.json_output:
        click.echo(created.id)
    first = first_run(client, created.id) if not quiet or wait else None
    fires = [] if quiet else _next_fires(state, created)
    if not state.json_output and not quiet:
        _print_created(state, created, first, fires)
    if wait and first is None:
        raise NotFound(f"job {created.id} has no run to wait for")
    if not state.json_output:
        if wait:
            wait_and_exit(state, first, wait_timeout)  # type: ignore[arg-type]
        return
    doc = _with_runs(created, first, fires)
    if wait:
        final = wait_for(state, first, wait_timeout)  # type: ignore[arg-type]
        state.emit({**doc, "final_run": to_jsonable(final)}, lambda: None)
        exit_for(final)
    state.emit(doc, lambda: None)


def _next_fires(state: CliState, job: Job) -> list[Fire]:
    """The next fires of a job with a schedule (none for one that runs now)."""
    if job.spec.schedule.kind is ScheduleKind.IMMEDIATE or job.state is not JobState.ACTIVE:
        return []
    return state.client().preview_fires(job.id, count=NEXT_FIRES)


def _with_runs(job: Job, first: Run | None, fires: list[Fire]) -> dict[str, Any]:
    """The job as JSON, with its first run's id and its next fires added."""
    return {
        **to_jsonable(job),
        "first_run_id": first.id if first else None,
        "next_fires": to_jsonable(fires),
    }


def _fire_lines(state: CliState, job: Job, fires: list[Fire]) -> list[tuple[str, str]]:
    tv = view(job.spec.schedule, utc=state.utc)
    return [
        ("next fire" if i == 0 else "", tv.when(f.at, with_zone=True)) for i, f in enumerate(fires)
    ]


def _print_created(state: CliState, job: Job, first: Run | None, fires: list[Fire]) -> None:
    tv = view(job.spec.schedule, utc=state.utc)
    run_text = "-" if first is None else f"{first.id} (due {tv.when(first.due_at, with_zone=True)})"
    print_fields([("job", job.id), ("first run", run_text), *_fire_lines(state, job, fires)])


@job.command("get")
@click.argument("job_id")
@pass_state
def job_get(state: CliState, job_id: str) -> None:
    """Show one job, with its last run's outcome."""
    client = state.client()
    found = client.get_job(job_id)
    if state.json_output:
        state.emit(found, lambda: None)
        return
    try:
        last: Run | None = latest_run(client, job_id)
    except NotFound:
        last = None
    if last is not None and last.state is RunState.PENDING:
        last = None  # none has started yet
    print_job(found, last, utc=state.utc)


def jobs_json(job: Job) -> dict[str, Any]:
    """A listed job as JSON, its health with its counts and rate."""
    plain = to_jsonable(job)
    plain["health"] = health_json(job.health, plain["health"])
    return plain


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
    """List jobs (all but DELETED unless --state is given), with each one's last run."""
    jobs = state.client().iter_jobs(
        states=states,
        name_prefix=name_prefix,
        labels=dict(labels),
        page_size=1000 if all_pages else min(limit + 1, 1000),
        with_health=True,
    )
    # One job past the limit says whether the list was cut short.
    listed = list(jobs if all_pages else islice(jobs, limit + 1))
    more = not all_pages and len(listed) > limit
    listed = listed[:limit] if more else listed
    if state.json_output:
        state.emit([jobs_json(j) for j in listed], lambda: None)
    else:
        print_jobs(
            listed,
            last_outcomes(state.client(), listed),
            utc=state.utc,
            unicode=speaks_utf8(),
        )
    if more:
        click.echo(f"(first {limit} jobs shown: use --all or a larger --limit)", err=True)


@job.command("update")
@click.argument("job_id")
@click.option("--name", help="New name.")
@job_flags
@click.option(
    "--expected-version",
    type=click.IntRange(1, limits.MAX_VERSION),
    help="Fail unless the job is at this version [the version read].",
)
@pass_state
def job_update(
    state: CliState, job_id: str, expected_version: int | None, options: JobOptions
) -> None:
    """Change the options given (same flags as create; ARGV after -- replaces the command)."""
    if options == JobOptions():
        raise usage_error("nothing to change: give at least one option")
    client = state.client()
    current = client.get_job(job_id)
    spec = apply_options(current.spec, options)
    spec = with_artifact(spec, options, lambda path: client.upload_artifact(path))
    updated = client.update_job(job_id, spec, expected_version=expected_version or current.version)
    rescheduled = updated.spec.schedule != current.spec.schedule
    fires = _next_fires(state, updated) if rescheduled else []
    if state.json_output:
        state.emit({**to_jsonable(updated), "next_fires": to_jsonable(fires)}, lambda: None)
        return
    print_fields(
        [
            ("job", updated.id),
            ("version", str(updated.version)),
            *_fire_lines(state, updated, fires),
        ]
    )


@job.command("pause")
@click.argument("job_id")
@pass_state
def job_pause(state: CliState, job_id: str) -> None:
    """Stop firing until resumed."""
    paused = state.client().pause_job(job_id)
    state.emit(paused, lambda: print_job_state(paused))


@job.command("resume")
@click.argument("job_id")
@pass_state
def job_resume(state: CliState, job_id: str) -> None:
    """Fire again from the next fire on."""
    resumed = state.client().resume_job(job_id)
    state.emit(resumed, lambda: print_job_state(resumed))


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
    state.emit(deleted, lambda: print_job_state(deleted))


@job.command("preview")
@click.argument("job_id", required=False)
@schedule_flags
@click.option("--after", type=TIME, help="Fires after TIME [now].")
@click.option(
    "--count", type=click.IntRange(1, limits.MAX_PREVIEW_COUNT), default=10, show_default=True
)
@pass_state
def job_preview(
    state: CliState,
    job_id: str | None,
    after: datetime | None,
    count: int,
    options: JobOptions,
) -> None:
    """The next fires of job ID, or of a --cron or --every schedule."""
    given = (("ID", job_id), ("--cron", options.cron), ("--every", options.every))
    sources = [name for name, v in given if v is not None]
    if len(sources) != 1:
        raise usage_error("give exactly one of ID, --cron or --every")
    if job_id and options != JobOptions():
        raise usage_error("schedule options apply to a --cron or --every preview, not to a job ID")
    source = job_id or schedule_from_options(Schedule.immediate(), options)
    fires = state.client().preview_fires(source, count=count, after=after)
    state.emit(fires, lambda: print_fires(fires))
