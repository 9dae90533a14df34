"""The ``shardcron`` group: its global options, its error exits and its command groups.

``--target``, ``--owner``, ``--token``, ``--json`` and ``--timeout`` come before the
subcommand and become the ``CliState`` every command reads; ``--target`` may name
several api nodes (``host1:7400,host2:7400``), which the client fails over among. A ``ShardcronError`` raised by any
subcommand (those added from outside too) prints ``error: CODE: message`` on stderr and
exits with the code ``EXIT_CODES`` gives it, never with a traceback.
"""

from __future__ import annotations

from typing import Any

import click

from shardcron.client.cli.cluster import cluster
from shardcron.client.cli.dead_letters import dead_letters
from shardcron.client.cli.jobs import job
from shardcron.client.cli.runs import run
from shardcron.client.cli.state import CliState
from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import DEFAULT_TARGET, Client
from shardcron.client.types import DEFAULT_OWNER

EXIT_CODES = {
    "UNAUTHENTICATED": 5,
    "PERMISSION_DENIED": 5,
    "INVALID_ARGUMENT": 2,
    "NOT_FOUND": 3,
    "ABORTED": 4,
    "ALREADY_EXISTS": 4,
    "FAILED_PRECONDITION": 4,
}


class ShardcronGroup(click.Group):
    """A group that turns ``ShardcronError`` from any subcommand into a one-line message
    on stderr and an exit code (``EXIT_CODES``, 1 otherwise)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ShardcronError as e:
            click.echo(f"error: {e.code}: {e.message}", err=True)
            ctx.exit(EXIT_CODES.get(e.code, 1))


@click.group(
    name="shardcron", cls=ShardcronGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--target",
    envvar="SHARDCRON_TARGET",
    default=DEFAULT_TARGET,
    show_default=True,
    help="host:port of an api node, or several comma-separated to fail over among "
    "[env SHARDCRON_TARGET].",
)
@click.option(
    "--owner",
    envvar="SHARDCRON_OWNER",
    default=None,
    help=f"Owner (tenant) to act as; default: the token's one owner, or {DEFAULT_OWNER!r}"
    " [env SHARDCRON_OWNER].",
)
@click.option(
    "--token",
    envvar="SHARDCRON_TOKEN",
    default="",
    show_default=False,
    help="Bearer token for a node with an auth file [env SHARDCRON_TOKEN].",
)
@click.option("--json", "json_output", is_flag=True, help="Print one JSON document.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds each call may take.",
)
@click.version_option(package_name="shardcron")
@click.pass_context
def cli(
    ctx: click.Context,
    target: str,
    owner: str | None,
    token: str,
    json_output: bool,
    timeout: float,
) -> None:
    """shardcron: a distributed job scheduler.
    \f
    An ``obj`` given to ``cli.main`` that is callable replaces ``Client`` as the client
    factory (tests pass a fake).
    """
    connect = ctx.obj if callable(ctx.obj) else Client
    ctx.obj = CliState(
        target=target,
        owner=owner,
        json_output=json_output,
        timeout=timeout,
        connect=connect,
        token=token,
    )
    ctx.call_on_close(ctx.obj.close)


for group in (job, run, dead_letters, cluster):
    cli.add_command(group)
