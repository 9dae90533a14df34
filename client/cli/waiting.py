"""Waiting for a run from the command line: ``run wait`` and ``job create --wait``.

The run is followed through its retries (``lookups.follow``), each retried attempt
reported on stderr; the last attempt's final state is printed (``RUN_ID STATE``, or
the run as JSON) and the command exits 0 only if it SUCCEEDED, 1 otherwise or when
the timeout passes (``error: DEADLINE_EXCEEDED`` on stderr). Under ``--json`` the
final run is one JSON document (``job create --wait`` adds it to the job's).
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

import click

from shardcron.client.cli.lookups import follow
from shardcron.client.cli.state import CliState
from shardcron.client.cli.times import view
from shardcron.client.errors import ShardcronError
from shardcron.client.types import Run, RunState


class WaitTimedOut(ShardcronError):
    """The run was not final when the wait's timeout passed (exit code 1)."""

    code = "DEADLINE_EXCEEDED"


def wait_and_exit(state: CliState, run: Run, timeout: timedelta | None) -> NoReturn:
    """Follow ``run`` to its end, print it, and exit 0 only if it SUCCEEDED."""
    final = wait_for(state, run, timeout)
    state.emit(final, lambda: click.echo(f"{final.id} {final.state.value}"))
    exit_for(final)


def exit_for(final: Run) -> NoReturn:
    """Exit 0 if ``final`` SUCCEEDED, 1 otherwise."""
    raise click.exceptions.Exit(0 if final.state is RunState.SUCCEEDED else 1)


def wait_for(state: CliState, run: Run, timeout: timedelta | None) -> Run:
    """``run`` followed through its retries to its end, each retry told on stderr.
    ``WaitTimedOut`` once ``timeout`` has passed."""
    tv = view(None, utc=state.utc)

    def retried(failed: Run, retry: Run) -> None:
        why = failed.reason.value or failed.state.value
        click.echo(
            f"attempt {failed.attempt} {failed.state.value} ({why}): attempt {retry.attempt} "
            f"due {tv.when(retry.due_at, with_zone=True)} as run {retry.id}",
            err=True,
        )

    seconds = None if timeout is None else timeout.total_seconds()
    try:
        return follow(state.client(), run, timeout=seconds, on_retry=retried)
    except TimeoutError as e:
        raise WaitTimedOut(str(e)) from None
