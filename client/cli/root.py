"""The ``shardcron`` group: its options, its error exits and its command groups.

The root options (``root_options``: ``--target``, ``--owner``, ``--token``, ``--json``,
``--utc``, ``--timeout``) and the TLS flags (``--tls-ca``, ``--tls-cert``, ``--tls-key``)
become the ``CliState`` every command reads; all but ``--timeout`` may also come after
the subcommand. ``--target`` may name several api nodes
(``host1:7400,host2:7400``), which the client fails over among. A ``ShardcronError``
raised by any subcommand (those added from outside too) prints ``error: CODE: message``
on stderr, or with ``--json`` one JSON document there (``{"error": {"code", "message",
"field"}}``, usage errors too), and exits with the code ``EXIT_CODES`` gives it, never
with a traceback. Ctrl-C ends any command quietly with exit code 130.
"""

from __future__ import annotations

import json
from typing import Any

import click

from shardcron.client.cli.cluster import cluster
from shardcron.client.cli.completion import completion
from shardcron.client.cli.dead_letters import dead_letters
from shardcron.client.cli.jobs import job
from shardcron.client.cli.notify import notify
from shardcron.client.cli.root_options import accept_late, root_options
from shardcron.client.cli.runs import run
from shardcron.client.cli.state import CliState
from shardcron.client.cli.tls_options import client_tls_options
from shardcron.client.errors import InvalidArgument, ShardcronError
from shardcron.client.sdk import Client
from shardcron.client.tls import ClientTls

EXIT_CODES = {
    "UNAUTHENTICATED": 5,
    "PERMISSION_DENIED": 5,
    "INVALID_ARGUMENT": 2,
    "NOT_FOUND": 3,
    "ABORTED": 4,
    "ALREADY_EXISTS": 4,
    "FAILED_PRECONDITION": 4,
}
INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C
_JSON_ERRORS = "shardcron.json_errors"  # ctx.meta key: --json given anywhere


class ShardcronGroup(click.Group):
    """A group that turns ``ShardcronError`` from any subcommand into a one-line message
    (or a JSON document) on stderr and an exit code (``EXIT_CODES``, 1 otherwise), and
    Ctrl-C into exit code 130."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        options = args[: args.index("--")] if "--" in args else args
        ctx.meta[_JSON_ERRORS] = "--json" in options
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ShardcronError as e:
            field = e.field if isinstance(e, InvalidArgument) else ""
            _fail(ctx, e.code, e.message, field, EXIT_CODES.get(e.code, 1))
        except click.UsageError as e:
            if not ctx.meta.get(_JSON_ERRORS):
                raise
            _fail(ctx, "USAGE", e.format_message(), "", e.exit_code)
        except KeyboardInterrupt:
            ctx.exit(INTERRUPTED)


def _fail(ctx: click.Context, code: str, message: str, field: str, exit_code: int) -> None:
    if ctx.meta.get(_JSON_ERRORS):
        error = {"code": code, "message": message, **({"field": field} if field else {})}
        click.echo(json.dumps({"error": error}), err=True)
    else:
        click.echo(f"error: {code}: {message}", err=True)
    ctx.exit(exit_code)


@click.group(
    name="shardcron", cls=ShardcronGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@root_options
@client_tls_options
@click.version_option(package_name="shardcron")
@click.pass_context
def cli(
    ctx: click.Context,
    target: str,
    owner: str | None,
    token: str,
    json_output: bool,
    utc: bool,
    timeout: float,
    client_tls: ClientTls,
) -> None:
    """shardcron: a distributed job scheduler.

    --target, --owner, --token, --json, --utc and the --tls-* flags may also come
    after the subcommand.
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
        utc=utc,
        connect=connect,
        token=token,
        tls=client_tls,
    )
    ctx.call_on_close(ctx.obj.close)


for group in (job, run, dead_letters, notify, cluster):
    accept_late(group)
    cli.add_command(group)
cli.add_command(completion)
