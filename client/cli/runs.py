"""``shardcron run ...``: list a job's runs, show, cancel and wait for one, read its output.

``run logs`` writes the output's bytes as they are (a pipe closed early ends it
quietly); ``run wait`` exits 0 only for a SUCCEEDED run, so scripts can chain on it.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from itertools import islice

import click

from shardcron.client import limits
from shardcron.client.cli.output import print_run, print_runs
from shardcron.client.cli.params import DURATION, EnumChoice
from shardcron.client.cli.state import CliState, pass_state
from shardcron.client.types import RunState


@click.group()
def run() -> None:
    """Inspect runs, read their output, cancel them."""


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
    state.emit(runs, lambda: print_runs(runs))


@run.command("get")
@click.argument("run_id")
@pass_state
def run_get(state: CliState, run_id: str) -> None:
    """Show one run."""
    found = state.client().get_run(run_id)
    state.emit(found, lambda: print_run(found))


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
@click.option(
    "--offset",
    type=click.IntRange(-limits.MAX_OUTPUT_OFFSET, limits.MAX_OUTPUT_OFFSET),
    default=0,
    help="Start at byte N (negative: from the end).",
)
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
