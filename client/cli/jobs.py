"""``shardcron job ...``: create, list, show, change, pause, resume, run, delete and preview
jobs.

``create`` and ``update`` take the same flags (``job_flags``) and build the spec with the
same function (``apply_options``): create from nothing, update from the job as read, sent
back with the version read so that a concurrent change fails instead of being lost.
"""

from __future__ import annotations

from datetime import datetime
from itertools import islice

import click

from shardcron.client import limits
from shardcron.client.cli.job_options import (
    JobOptions,
    apply_options,
    job_flags,
    schedule_flags,
    schedule_from_options,
    spec_from_options,
)
from shardcron.client.cli.output import print_fires, print_job, print_job_state, print_jobs
from shardcron.client.cli.params import KEY_VALUE, TIME, EnumChoice, usage_error
from shardcron.client.cli.state import CliState, pass_state
from shardcron.client.types import JobState, Schedule


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
@pass_state
def job_create(state: CliState, idempotency_key: str, options: JobOptions) -> None:
    """Create job NAME running ARGV (after --) or a --handler; print its id.

    No schedule option runs it once, now. Times are ISO 8601 (naive = UTC) or
    relative (now+30s); durations are 500ms, 30s, 5m, 1h30m, 2d.

    \b
    Example:
      shardcron job create report --cron '0 9 * * 1-5' --tz Europe/Berlin \\
          --max-attempts 3 --timeout 30s -- /usr/local/bin/report --daily
    """
    spec = spec_from_options(options)
    created = state.client().create_job(spec, idempotency_key=idempotency_key)
    state.emit(created, lambda: click.echo(created.id))


@job.command("get")
@click.argument("job_id")
@pass_state
def job_get(state: CliState, job_id: str) -> None:
    """Show one job."""
    found = state.client().get_job(job_id)
    state.emit(found, lambda: print_job(found))


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
    # One job past the limit says whether the list was cut short.
    listed = list(jobs if all_pages else islice(jobs, limit + 1))
    more = not all_pages and len(listed) > limit
    listed = listed[:limit] if more else listed
    state.emit(listed, lambda: print_jobs(listed))
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
    updated = client.update_job(job_id, spec, expected_version=expected_version or current.version)
    state.emit(updated, lambda: click.echo(f"{updated.id} version {updated.version}"))


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
