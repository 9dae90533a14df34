"""The authentication flags of ``dev``, ``node`` and ``worker``, and what they set up.

- ``--auth-file FILE`` (``dev``, ``node``; env ``SHARDCRON_AUTH_FILE``): the principals
  a node accepts (``coordinator.auth``). A file that does not load stops the start,
  naming the line and field; SIGHUP reads it again (a bad file then is logged and the
  principals in force are kept).
- ``--node-token`` (``node``; env ``SHARDCRON_NODE_TOKEN``): the token this node sends
  on its calls to other nodes; other nodes' auth files must hold it as a ``node``
  principal. A node with an auth file needs one, and checks its own file accepts it.
- ``--token-file FILE`` (``worker``; env ``SHARDCRON_TOKEN_FILE``), or ``--token`` (env
  ``SHARDCRON_TOKEN``; or the root ``--token``): the worker's bearer token; its
  principal's owners are the runs it is given. A token typed on the command line is
  readable by every process of the host (``/proc/PID/cmdline``): the worker says so,
  and the file or the environment is the way to give it. No command a worker runs
  gets either (``executor.CREDENTIAL_ENV_KEYS``).

``dev``'s in-process workers are trusted as before: they get a random token of a
principal of every owner that only this process knows and no reload removes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import signal
from collections.abc import Callable
from typing import Any, TypeVar

import click

from shardcron.client.cli.state import CliState
from shardcron.client.errors import ShardcronError
from shardcron.coordinator.auth import (
    ANY_OWNER,
    AuthFileError,
    AuthSource,
    Principal,
    Role,
    authorize,
)

F = TypeVar("F", bound=Callable[..., Any])
IN_PROCESS_WORKERS = "shardcron-dev-in-process-workers"
_NODE_METHOD = "/shardcron.v1.PollerService/NotifyRuns"


def auth_file_option(f: F) -> F:
    return click.option(
        "--auth-file",
        envvar="SHARDCRON_AUTH_FILE",
        default=None,
        type=click.Path(dir_okay=False),
        help="TOML file of the principals allowed to call (re-read on SIGHUP); "
        "without one every caller is trusted [env SHARDCRON_AUTH_FILE].",
    )(f)


def node_token_option(f: F) -> F:
    return click.option(
        "--node-token",
        envvar="SHARDCRON_NODE_TOKEN",
        default="",
        help="Token this node sends to other nodes: a node principal's, needed with "
        "--auth-file [env SHARDCRON_NODE_TOKEN].",
    )(f)


def worker_token_option(f: F) -> F:
    return click.option(
        "--token",
        "worker_token",
        envvar="SHARDCRON_TOKEN",
        default="",
        help="Bearer token of this worker's principal, for nodes with an auth file "
        "[env SHARDCRON_TOKEN].",
    )(f)


def worker_token_file_option(f: F) -> F:
    return click.option(
        "--token-file",
        "worker_token_file",
        envvar="SHARDCRON_TOKEN_FILE",
        default=None,
        type=click.Path(dir_okay=False, exists=True),
        help="File holding the bearer token of this worker's principal (first line) "
        "[env SHARDCRON_TOKEN_FILE].",
    )(f)


def worker_token(token: str, token_file: str | None) -> str | None:
    """The worker's token: ``--token-file``'s, else ``--token`` (or ``SHARDCRON_TOKEN``),
    else the root ``--token``; None without one. A token typed on the command line is
    taken, with a warning that every process of the host can read it there."""
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            text = f.readline().strip()
        if not text:
            raise click.ClickException(f"cannot start: {token_file} holds no token")
        return text
    ctx = click.get_current_context()
    typed = bool(token) and (
        ctx.get_parameter_source("worker_token") == click.core.ParameterSource.COMMANDLINE
    )
    if not token:
        token = root_token()
        typed = bool(token) and token != os.environ.get("SHARDCRON_TOKEN")
    if typed:
        click.echo(
            "shardcron worker: warning: a token on the command line can be read by every "
            "process of this host; give it with --token-file or SHARDCRON_TOKEN",
            err=True,
        )
    return token or None


def root_token() -> str:
    """The ``--token`` given before the subcommand (``shardcron --token T worker``)."""
    state = click.get_current_context().find_object(CliState)
    return state.token if state is not None else ""


def open_auth(path: str, extra: tuple[Principal, ...] = ()) -> AuthSource:
    """The auth file's principals, or a ClickException naming what is wrong with it."""
    try:
        return AuthSource(path, extra=extra)
    except AuthFileError as e:
        raise click.ClickException(f"cannot start: {e}") from e


def dev_auth(path: str | None) -> tuple[AuthSource | None, str | None]:
    """``dev``'s auth source (None without a file) and its in-process workers' token."""
    if not path:
        return None, None
    token = secrets.token_urlsafe(32)
    workers = Principal(
        name=IN_PROCESS_WORKERS,
        role=Role.WORKER,
        owners=frozenset({ANY_OWNER}),
        token_sha256=hashlib.sha256(token.encode()).hexdigest(),
    )
    return open_auth(path, (workers,)), token


def node_auth(path: str | None, node_token: str) -> AuthSource | None:
    """``node``'s auth source, None without a file. With one, ``node_token`` must be a
    node principal's token in it: other nodes, sharing the file, would refuse it too."""
    if not path:
        return None
    auth = open_auth(path)
    if not node_token:
        raise click.ClickException(
            "cannot start: --auth-file needs --node-token (or SHARDCRON_NODE_TOKEN): "
            "the token of a node principal, which this node sends to the others"
        )
    try:
        authorize(auth.table, _NODE_METHOD, {"authorization": f"Bearer {node_token}"})
    except ShardcronError as e:
        raise click.ClickException(
            f"cannot start: --node-token is not a node principal's token in {path}: {e}"
        ) from e
    return auth


def reload_on_sighup(auth: AuthSource | None) -> None:
    """SIGHUP reads the auth file again (on the running loop)."""
    if auth is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, auth.reload)
