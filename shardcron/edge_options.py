"""The command-line options of a node's edges beyond TLS and credentials, declared once
for ``dev`` and ``node``: which web sites the HTTP listener serves
(``--http-allowed-hosts``, ``--http-allowed-origins``) and how many long calls one
principal may hold open (``--max-follows``, ``--max-waits``, ``--max-worker-streams``),
handed over as one ``EdgeOptions``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from shardcron.coordinator.open_calls import CallLimits


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeOptions:
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    call_limits: CallLimits = field(default_factory=CallLimits)


def _names(values: tuple[str, ...]) -> tuple[str, ...]:
    """Every name of repeated, comma-separated values."""
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


def _origins(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    origins = _names(value)
    for origin in origins:
        scheme, sep, rest = origin.partition("://")
        if scheme not in ("http", "https") or not sep or not rest or "/" in rest.rstrip("/"):
            raise click.BadParameter(f"{origin!r}: an origin is scheme://host[:port]")
    return origins


def edge_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the module docstring; the command receives ``edge``."""
    defaults = CallLimits()

    def hosts(
        _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
    ) -> tuple[str, ...]:
        return _names(value)

    options = [
        click.option(
            "--http-allowed-hosts",
            multiple=True,
            callback=hosts,
            help="Host names the HTTP listener serves beyond localhost, IP addresses and "
            "its own names (comma-separated or repeated): the names of a proxy in front.",
        ),
        click.option(
            "--http-allowed-origins",
            multiple=True,
            callback=_origins,
            help="Web origins (scheme://host:port) whose pages may call the HTTP API, "
            "beyond the node's own dashboard (comma-separated or repeated).",
        ),
        *(
            click.option(
                f"--max-{kind}",
                default=default,
                show_default=True,
                type=click.IntRange(min=1),
                help=f"{what} one principal may hold open on this node.",
            )
            for kind, default, what in (
                ("follows", defaults.follows, "Output follows"),
                ("waits", defaults.waits, "WaitRun calls"),
                ("worker-streams", defaults.worker_streams, "Worker streams"),
            )
        ),
    ]

    def command(**kwargs: Any) -> Any:
        edge = EdgeOptions(
            allowed_hosts=kwargs.pop("http_allowed_hosts"),
            allowed_origins=kwargs.pop("http_allowed_origins"),
            call_limits=CallLimits(
                follows=kwargs.pop("max_follows"),
                waits=kwargs.pop("max_waits"),
                worker_streams=kwargs.pop("max_worker_streams"),
            ),
        )
        return f(edge=edge, **kwargs)

    functools.update_wrapper(command, f)  # with the options declared below this one
    for option in reversed(options):
        command = option(command)
    return command
