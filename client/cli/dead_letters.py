"""``shardcron dead-letters ...``: list, replay and drop the runs that failed with no
attempt left.

Replay and drop act on the dead letters named, by run id or all of one job's; naming
neither is a usage error, so no command can act on every dead letter by omission.
"""

from __future__ import annotations

from typing import Any

import click

from shardcron.client.cli.output import print_runs_by_job
from shardcron.client.cli.params import usage_error
from shardcron.client.cli.state import CliState, pass_state


@click.group("dead-letters")
def dead_letters() -> None:
    """Runs that failed with no attempt left: list, replay, drop."""


@dead_letters.command("list")
@click.option("--job", "job_id", default="", help="Only this job's.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@pass_state
def dead_letters_list(state: CliState, job_id: str, limit: int) -> None:
    """List dead letters, newest first."""
    page = state.client().list_dead_letters(job_id=job_id, page_size=limit)
    state.emit(page.items, lambda: print_runs_by_job(page.items, utc=state.utc))


_ALL_OF_JOB = click.option("--job", "job_id", default="", help="Every dead letter of this job.")
_RUN_IDS = click.argument("run_ids", nargs=-1)


def _dead_letter_targets(job_id: str, run_ids: tuple[str, ...]) -> dict[str, Any]:
    if bool(job_id) == bool(run_ids):
        raise usage_error("give either --job JOB_ID or RUN_IDs")
    return {"job_id": job_id, "run_ids": run_ids}


@dead_letters.command("replay")
@_ALL_OF_JOB
@_RUN_IDS
@pass_state
def dead_letters_replay(state: CliState, job_id: str, run_ids: tuple[str, ...]) -> None:
    """Start a new run for each dead letter; print the new runs."""
    targets = _dead_letter_targets(job_id, run_ids)
    runs = state.client().replay_dead_letters(**targets)
    state.emit(runs, lambda: print_runs_by_job(runs, utc=state.utc))


@dead_letters.command("drop")
@_ALL_OF_JOB
@_RUN_IDS
@pass_state
def dead_letters_drop(state: CliState, job_id: str, run_ids: tuple[str, ...]) -> None:
    """Forget dead letters; print how many."""
    targets = _dead_letter_targets(job_id, run_ids)
    dropped = state.client().drop_dead_letters(**targets)
    state.emit({"dropped": dropped}, lambda: click.echo(f"dropped {dropped}"))
