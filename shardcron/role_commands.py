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


MAX_LEASE_LEAD = timedelta(seconds=10)


def lease_lead_option(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--lease-lead``: how far ahead of their due instant runs are triggered and leased
    to workers that hold a lease until then (``PollerConfig.lease_lead``)."""

    def checked(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
        lead = duration_option(ctx, param, value)
        assert lead is not None
        if lead > MAX_LEASE_LEAD:
            raise click.BadParameter(f"at most {MAX_LEASE_LEAD.total_seconds():g}s")
        return lead

    return click.option(
        "--lease-lead",
        default=default,
        show_default=True,
        callback=checked,
        help="Trigger and lease runs this far ahead of their due instant to workers that "
        "wait for it, so a turn's work is done by then (0s: at the instant). A lease "
        "given ahead holds its worker's slot while it waits.",
    )


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
