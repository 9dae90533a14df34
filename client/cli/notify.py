"""``shardcron notify ...``: the webhook deliveries of the owner's notifications, each
with its attempts and status (a job's rules are set by ``job create|update
--notify-webhook URL --notify-on RULES``)."""

from __future__ import annotations

import click

from shardcron.client.cli.output import print_table
from shardcron.client.cli.state import CliState, pass_state
from shardcron.client.cli.times import view


@click.group("notify")
def notify() -> None:
    """Webhook notifications of runs' ends: list their deliveries."""


@notify.command("list")
@click.argument("job_id", required=False, default="")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@pass_state
def notify_list(state: CliState, job_id: str, limit: int) -> None:
    """List deliveries, newest first: of JOB_ID, or of every job."""
    page = state.client().list_deliveries(job_id=job_id, page_size=limit)
    times = view(None, utc=state.utc)

    def human() -> None:
        if not page.items:
            click.echo("no deliveries")
            return
        rows = [
            (
                d.id,
                d.rule.lower(),
                d.status.lower(),
                d.attempts,
                times.when(d.last_attempt_at, short=True),
                times.when(d.next_attempt_at, short=True),
                d.last_error or d.reason,
            )
            for d in page.items
        ]
        headers = ("DELIVERY", "RULE", "STATUS", "ATTEMPTS", "LAST", "NEXT", "ERROR/REASON")
        print_table(rows, headers, cut=(0, 6))

    state.emit(page.items, human)
