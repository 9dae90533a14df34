"""The command-line options of the data and tenant policies: ``--retention``,
``--quota-file`` and ``--secrets-key-file`` (``dev``, ``node``) and ``--inherit-env``
(``dev``, ``worker``), declared once for every command that takes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from shardcron.coordinator.quotas import Quotas
from shardcron.coordinator.sealing import KeyRing


def _retention(_ctx: click.Context, param: click.Parameter, value: str) -> timedelta | None:
    from shardcron.coordinator.retention import parse_retention

    try:
        return parse_retention(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _quota_file(_ctx: click.Context, param: click.Parameter, value: str | None) -> Quotas:
    from shardcron.coordinator.quotas import QuotaFileError, load_quotas

    if value is None:
        return Quotas()
    try:
        return load_quotas(value)
    except (QuotaFileError, OSError) as e:
        raise click.BadParameter(str(e)) from e


def _secrets_key_file(
    _ctx: click.Context, param: click.Parameter, value: str | None
) -> KeyRing | None:
    from shardcron.coordinator.sealing import KeyFileError, load_key_ring

    if not value:
        return None
    try:
        return load_key_ring(value)
    except (KeyFileError, OSError) as e:
        raise click.BadParameter(str(e)) from e


def store_policy_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--retention`` (a ``timedelta``, None = keep every run), ``--quota-file``
    (handed over as ``quota_file``: the ``Quotas`` read, the defaults without one) and
    ``--secrets-key-file`` (handed over as ``secret_keys``: the ``KeyRing``, or None)."""
    f = click.option(
        "--secrets-key-file",
        "secret_keys",
        envvar="SHARDCRON_SECRETS_KEY_FILE",
        type=click.Path(dir_okay=False),
        callback=_secrets_key_file,
        help="File of the keys that seal secret env values at rest, one 'KEY_ID BASE64' "
        "per line, the first sealing (the same file on every node) "
        "[env SHARDCRON_SECRETS_KEY_FILE].",
    )(f)
    f = click.option(
        "--quota-file",
        type=click.Path(dir_okay=False, exists=True),
        callback=_quota_file,
        help='TOML file of [quota.default] and [quota.owner."NAME"] limits.',
    )(f)
    return click.option(
        "--retention",
        default="30d",
        show_default=True,
        callback=_retention,
        help="Delete final runs and their output this long after they end (0 = keep all).",
    )(f)


inherit_env_option = click.option(
    "--inherit-env",
    is_flag=True,
    help="Commands get this process's whole environment, not only PATH, HOME and LANG.",
)
