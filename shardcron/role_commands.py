"""What the commands that run a role (``dev``, ``node``, ``worker``, ``store init``)
share: the log set-up, option parsers for durations and ``KEY=VALUE`` labels, the
Cassandra options, and the wait for SIGINT or SIGTERM that ends a role."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from shardcron.client.schedule import parse_duration


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    """``--label KEY=VALUE`` values as a mapping; a usage error for one without ``=``."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--label")
        out[key] = value
    return out


def duration_option(
    _ctx: click.Context, param: click.Parameter, value: str | None
) -> timedelta | None:
    """A click callback: a duration such as ``10s`` or ``5m`` as a ``timedelta``."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


async def until_signalled() -> None:
    """Returns at the first SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def cassandra_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--cassandra`` (contact points) and ``--keyspace``."""
    f = click.option(
        "--keyspace", default="shardcron", show_default=True, envvar="SHARDCRON_KEYSPACE"
    )(f)
    f = click.option(
        "--cassandra",
        required=True,
        envvar="SHARDCRON_CASSANDRA",
        help="Cassandra contact points, comma-separated.",
    )(f)
    return f
