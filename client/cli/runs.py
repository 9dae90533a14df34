"""``shardcron run ...``: list a job's runs, show, cancel and wait for one, read its output
and its result files.

``run get``, ``run logs``, ``run wait`` and ``run cancel`` take a run id or a job id
(its latest run: ``lookups.run_named``). ``run logs`` writes the output's bytes as they
are (a pipe closed early ends it quietly); ``run wait`` follows the run through its
retries and exits 0 only for a SUCCEEDED run, so scripts can chain on it. Times show in the job's
zone (a cron job's), else in local time, or in UTC with ``--utc``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from datetime import timedelta
from itertools import islice

import click

from shardcron.client import limits
from shardcron.client.cli.lookups import run_named
from shardcron.client.cli.output import print_results, print_run, print_runs, print_runs_by_job
from shardcron.client.cli.params import BYTE_RANGE, DURATION, EnumChoice
from shardcron.client.cli.state import CliState, pass_state
from shardcron.client.cli.times import TimeView, view
from shardcron.client.cli.waiting import wait_and_exit
from shardcron.client.errors import NotFound
from shardcron.client.types import RunState


@click.group()
def run() -> None:
    """Inspect runs, read their output, cancel them."""


def _job_view(state: CliState, job_id: str) -> TimeView:
    """How the job's times read: in its zone (see ``times.view``)."""
    try:
        schedule = state.client().get_job(job_id).spec.schedule
    except NotFound:
        schedule = None
    return view(schedule, utc=state.utc)


@run.command("list")
@click.argument("job_id", required=False, default="")
@click.option("--state", "states", type=EnumChoice(RunState), multiple=True, help="Repeatable.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@pass_state
def run_list(state: CliState, job_id: str, states: tuple[RunState, ...], limit: int) -> None:
    """The job's runs, newest first; with no JOB_ID, the runs of every job (e.g.
    `--state RUNNING`), by job, newest first within a job."""
    runs = list(
        islice(state.client().iter_runs(job_id, states=states, page_size=min(limit, 1000)), limit)
    )
    if state.json_output:
        state.emit(runs, lambda: None)
    elif job_id:
        print_runs(runs, _job_view(state, job_id))
    else:  # several jobs: one block per job, as dead letters are shown
        print_runs_by_job(runs, utc=state.utc)


@run.command("get")
@click.argument("run_id", metavar="RUN_ID|JOB_ID")
@pass_state
def run_get(state: CliState, run_id: str) -> None:
    """Show one run: RUN_ID, or the latest run of JOB_ID."""
    found = run_named(state.client(), run_id)
    if state.json_output:
        state.emit(found, lambda: None)
        return
    print_run(found, _job_view(state, found.job_id))


@run.command("cancel")
@click.argument("run_id", metavar="RUN_ID|JOB_ID")
@pass_state
def run_cancel(state: CliState, run_id: str) -> None:
    """Cancel a pending or running run: RUN_ID, or the latest run of JOB_ID."""
    client = state.client()
    cancelled = client.cancel_run(run_named(client, run_id).id)
    state.emit(cancelled, lambda: click.echo(f"{cancelled.id} {cancelled.state.value}"))


@run.command("logs")
@click.argument("run_id", metavar="RUN_ID|JOB_ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the run is final.")
@click.option(
    "--offset",
    type=click.IntRange(-limits.MAX_OUTPUT_OFFSET, limits.MAX_OUTPUT_OFFSET),
    default=None,
    help="Start at byte N (negative: from the end).",
)
@click.option("--head", type=click.IntRange(0, limits.MAX_OUTPUT_OFFSET), help="The first N bytes.")
@click.option("--tail", type=click.IntRange(0, limits.MAX_OUTPUT_OFFSET), help="The last N bytes.")
@click.option("--bytes", "byte_range", type=BYTE_RANGE, help="Bytes A to B (both kept), as A-B.")
@pass_state
def run_logs(
    state: CliState,
    run_id: str,
    follow: bool,
    offset: int | None,
    head: int | None,
    tail: int | None,
    byte_range: tuple[int, int] | None,
) -> None:
    """Write a run's output (stdout and stderr, whole when the node keeps it in a blob
    store, else the tail kept) to stdout: of RUN_ID, or of the latest run of JOB_ID."""
    given = [n for n, v in (("--offset", offset), ("--head", head), ("--tail", tail),
             ("--bytes", byte_range)) if v is not None]  # fmt: skip
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)}: give one of them")
    if follow and (head is not None or byte_range is not None):
        raise click.UsageError("--follow reads to the run's end: not with --head or --bytes")
    start, limit = offset or 0, 0
    if head is not None:
        start, limit = 0, head
    elif tail is not None:
        start = -tail
    elif byte_range is not None:
        start, limit = byte_range[0], byte_range[1] - byte_range[0] + 1
    client = state.client()
    found = run_named(client, run_id)
    if (head == 0 or tail == 0) and not follow:
        return  # nothing asked for
    chunks = client.read_output(found.id, offset=start, follow=follow, limit=limit)
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


@run.command("results")
@click.argument("run_id", metavar="RUN_ID|JOB_ID")
@click.option("--get", "name", metavar="NAME", help="Download the result file NAME.")
@click.option(
    "-o",
    "--output",
    "path",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True),
    help="Where --get writes the file (default: stdout; '-' too).",
)
@pass_state
def run_results(state: CliState, run_id: str, name: str | None, path: str | None) -> None:
    """List the result files of a run (RUN_ID, or the latest run of JOB_ID): what its
    command left in $SHARDCRON_RESULT_DIR, and what was left out; with --get NAME, write
    that file (its sha256 checked) to -o FILE or stdout."""
    if path is not None and name is None:
        raise click.UsageError("-o/--output goes with --get NAME")
    client = state.client()
    found = run_named(client, run_id)
    if name is None:
        state.emit(
            {"results": list(found.results), "note": found.results_note},
            lambda: print_results(found),
        )
        return
    listed = next((f for f in found.results if f.name == name), None)
    if listed is None:
        raise NotFound(f"run {found.id} has no result file {limits.clip(name)!r}")
    digest = hashlib.sha256()
    to_stdout = path in (None, "-")
    out = click.get_binary_stream("stdout") if to_stdout else open(path, "wb")  # noqa: SIM115
    try:
        for data in client.read_result(found.id, name):
            digest.update(data)
            out.write(data)
        if digest.hexdigest() != listed.sha256:
            raise click.ClickException(f"{name}: the bytes read do not match its sha256")
    except BaseException:
        if not to_stdout:
            out.close()
            os.unlink(path)  # type: ignore[arg-type]  # never a partial file left
        raise
    if not to_stdout:
        out.close()


@run.command("wait")
@click.argument("run_id", metavar="RUN_ID|JOB_ID")
@click.option("--timeout", "wait_timeout", type=DURATION, help="Give up after DUR [never].")
@pass_state
def run_wait(state: CliState, run_id: str, wait_timeout: timedelta | None) -> None:
    """Wait until a run (RUN_ID, or the latest of JOB_ID) and its retries end; exit 0 if
    it SUCCEEDED, 1 otherwise."""
    wait_and_exit(state, run_named(state.client(), run_id), wait_timeout)
