"""``shardcron notify ...``: the webhook deliveries of the owner's notifications, each
with its attempts and status (``list``), and the owner's settings: the default rules of
its jobs that have none of their own (``defaults``), the signing secret (``set-secret``,
write-only), both shown by ``settings``. A job's own rules are set by ``job
create|update --notify-webhook URL --notify-on RULES``."""

from __future__ import annotations

import sys

import click

from shardcron.client.cli.job_options import notify_rules
from shardcron.client.cli.output import print_fields, print_table
from shardcron.client.cli.params import usage_error
from shardcron.client.cli.state import CliState, pass_state
from shardcron.client.cli.times import view
from shardcron.client.types import NotifyPolicy, NotifySettings


@click.group("notify")
def notify() -> None:
    """Webhook notifications of runs' ends: deliveries, default rules, signing secret."""


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


def _print_settings(settings: NotifySettings) -> None:
    d = settings.defaults
    print_fields(
        [
            ("default webhook", d.webhook_url if d else "-"),
            ("default rules", ",".join(d.rules) + (" (slack)" if d.slack else "") if d else "-"),
            ("signing secret", "set" if settings.secret_set else "not set"),
        ]
    )


@notify.command("settings")
@pass_state
def notify_settings(state: CliState) -> None:
    """Show the owner's default rules and whether a signing secret is set."""
    settings = state.client().notify_settings()
    state.emit(settings, lambda: _print_settings(settings))


@notify.command("defaults")
@click.option("--webhook", "webhook_url", metavar="URL", help="Where the default rules send.")
@click.option(
    "--on",
    "rules",
    metavar="RULES",
    help="failure, recovery, dead-letter, missed, consecutive=N, late=DURATION.",
)
@click.option("--slack/--no-slack", default=False, help="Slack's body instead of the record.")
@click.option("--clear", is_flag=True, help="Remove the owner's default rules.")
@pass_state
def notify_defaults(
    state: CliState, webhook_url: str | None, rules: str | None, slack: bool, clear: bool
) -> None:
    """Set the rules every job of the owner without rules of its own follows."""
    if clear:
        if webhook_url or rules:
            raise usage_error("--clear takes no --webhook or --on")
        defaults = None
    else:
        if not webhook_url or not rules:
            raise usage_error("give --webhook URL and --on RULES (or --clear)")
        try:
            fields = notify_rules(rules)
        except click.BadParameter as e:
            raise click.BadParameter(e.message, param_hint="--on") from None
        defaults = NotifyPolicy(webhook_url=webhook_url, slack=slack, **fields)
    settings = state.client().set_notify_defaults(defaults)
    state.emit(settings, lambda: _print_settings(settings))


@notify.command("set-secret")
@click.option("--clear", is_flag=True, help="Remove the secret: deliveries go unsigned.")
@pass_state
def notify_set_secret(state: CliState, clear: bool) -> None:
    """Set the secret the owner's deliveries are signed with, read from standard input
    (or asked for, unechoed, on a terminal): never on the command line, never shown."""
    if clear:
        secret = ""
    elif sys.stdin.isatty():
        secret = click.prompt("secret", hide_input=True, confirmation_prompt=True)
    else:
        secret = sys.stdin.readline().rstrip("\n")
        if not secret:
            raise usage_error("no secret on standard input (--clear removes it)")
    settings = state.client().set_notify_secret(secret)
    state.emit(settings, lambda: _print_settings(settings))
