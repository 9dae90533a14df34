"""The options of the ``shardcron`` root group, declared once, and accepted after the
subcommand as well (``shardcron run list JOB --json``).

``ROOT_OPTIONS`` is the one list: ``root_options`` puts each on the root group, with its
default and environment variable, and ``accept_late`` gives every command of the user's
groups (job, run, dead-letters, cluster) a hidden copy of each that is ``late``, without
default or environment variable: given after the subcommand, its value replaces the
root's in ``CliState`` (the field named like the option's parameter; the TLS flags,
declared on the root by ``tls_options``, are late only). An option that a
command declares itself (``run wait --timeout``) is not copied there, so ``--timeout``
is late nowhere and keeps its place before the subcommand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from shardcron.client.cli.state import CliState
from shardcron.client.cli.tls_options import PEM_FILE
from shardcron.client.sdk import DEFAULT_TARGET
from shardcron.client.types import DEFAULT_OWNER


@dataclass(frozen=True, slots=True, kw_only=True)
class RootOption:
    """One root option: click's declarations and settings, and whether it may also come
    after the subcommand."""

    decls: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    late: bool = True
    on_root: bool = True  # False: the root declares it another way (the TLS flags)


ROOT_OPTIONS: tuple[RootOption, ...] = (
    RootOption(
        decls=("--target",),
        settings={
            "envvar": "SHARDCRON_TARGET",
            "default": DEFAULT_TARGET,
            "show_default": True,
            "help": "host:port of an api node, or several comma-separated to fail over among "
            "[env SHARDCRON_TARGET].",
        },
    ),
    RootOption(
        decls=("--owner",),
        settings={
            "envvar": "SHARDCRON_OWNER",
            "default": None,
            "help": f"Owner (tenant) to act as; default: the token's one owner, or "
            f"{DEFAULT_OWNER!r} [env SHARDCRON_OWNER].",
        },
    ),
    RootOption(
        decls=("--token",),
        settings={
            "envvar": "SHARDCRON_TOKEN",
            "default": "",
            "show_default": False,
            "help": "Bearer token for a node with an auth file [env SHARDCRON_TOKEN].",
        },
    ),
    RootOption(
        decls=("--json", "json_output"),
        settings={"is_flag": True, "help": "Print one JSON document (errors too, on stderr)."},
    ),
    RootOption(
        decls=("--utc",),
        settings={
            "is_flag": True,
            "help": "Show times in UTC [a cron job's zone, else local time].",
        },
    ),
    RootOption(
        decls=("--timeout",),
        settings={
            "type": click.FloatRange(min=0, min_open=True),
            "default": 30.0,
            "show_default": True,
            "help": "Seconds each call may take.",
        },
        late=False,
    ),
    # ``client_tls_options`` puts these on the root (with their variables); after the
    # subcommand each replaces its file in the ``ClientTls`` the client connects with
    *(
        RootOption(
            decls=(f"--tls-{name}", f"late_tls_{name}"), settings={"type": PEM_FILE}, on_root=False
        )
        for name in ("ca", "cert", "key")
    ),
)


def root_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Declares every root option on the root group's function."""
    for option in reversed(ROOT_OPTIONS):
        if option.on_root:
            f = click.option(*option.decls, **option.settings)(f)
    return f


def accept_late(command: click.Command) -> None:
    """Gives ``command`` (every command under it, for a group) the late root options it
    does not declare itself."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_late(sub)
        return
    taken = {opt for param in command.params for opt in getattr(param, "opts", ())}
    for option in ROOT_OPTIONS:
        flags = {d for d in option.decls if d.startswith("-")}
        if option.late and not flags & taken:
            command.params.append(_late_copy(option))


def _late_copy(option: RootOption) -> click.Option:
    is_flag = bool(option.settings.get("is_flag"))
    return click.Option(
        list(option.decls),
        is_flag=is_flag,
        default=False if is_flag else None,
        type=option.settings.get("type"),
        expose_value=False,
        hidden=True,
        callback=_replace_root_value,
    )


def _replace_root_value(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None or value is False:
        return
    state = ctx.find_object(CliState)
    if state is not None and param.name is not None:
        setattr(state, param.name, value)
