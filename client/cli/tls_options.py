"""The TLS flags of every command, declared once (``shardcron.client.tls`` builds from them).

- ``client_tls_options``: ``--tls-ca``, ``--tls-cert``, ``--tls-key`` (each also from
  ``SHARDCRON_TLS_CA``, ``SHARDCRON_TLS_CERT``, ``SHARDCRON_TLS_KEY``) for whatever
  connects to a node: the root group (every user command) and ``shardcron worker``.
  The command receives them as ``client_tls: ClientTls``.
- ``server_tls_options``: ``--tls-cert``, ``--tls-key``, ``--tls-client-ca``,
  ``--tls-ca`` and ``--insecure`` for what serves (``dev``, ``node``). The command
  receives ``server_tls: ServerTls | None`` and ``insecure: bool``.

A half-given pair or a CA without a certificate is a usage error (exit code 2).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import click

from shardcron.client.errors import InvalidArgument
from shardcron.client.tls import (
    TLS_CA_ENV,
    TLS_CERT_ENV,
    TLS_KEY_ENV,
    ClientTls,
    ServerTls,
    server_tls,
)

PEM_FILE = click.Path(exists=True, dir_okay=False)


def _usage_error(e: InvalidArgument) -> click.UsageError:
    """``e`` in the flags' own spelling (``tls_cert`` -> ``--tls-cert``)."""
    as_flags = re.sub(r"\btls_\w+", lambda m: "--" + m.group(0).replace("_", "-"), e.message)
    return click.UsageError(as_flags)


def _built_into(
    f: Callable[..., Any],
    name: str,
    build: Callable[..., Any],
    options: tuple[Callable[[Any], Any], ...],
) -> Callable[..., Any]:
    """``f`` with ``options`` (shown in ``--help`` in that order), which it receives as
    one value, ``name``: what ``build`` makes of their values (keyword arguments)."""
    keys = [f"tls_{key}" for key in inspect.signature(build).parameters]

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        given = {key.removeprefix("tls_"): kwargs.pop(key) for key in keys}
        try:
            value = build(**given)
        except InvalidArgument as e:
            raise _usage_error(e) from None
        return f(*args, **{name: value}, **kwargs)

    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def _client_tls(ca: str | None, cert: str | None, key: str | None) -> ClientTls:
    return ClientTls(ca=ca, cert=cert, key=key)


def _server_tls(
    cert: str | None, key: str | None, client_ca: str | None, ca: str | None
) -> ServerTls | None:
    return server_tls(cert, key, client_ca=client_ca, ca=ca)


def client_tls_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the connecting side's TLS flags; the command gets ``client_tls``."""
    return _built_into(
        f,
        "client_tls",
        _client_tls,
        (
            click.option(
                "--tls-ca",
                envvar=TLS_CA_ENV,
                type=PEM_FILE,
                help="Connect with TLS, trusting the CA in this PEM file [env SHARDCRON_TLS_CA].",
            ),
            click.option(
                "--tls-cert",
                envvar=TLS_CERT_ENV,
                type=PEM_FILE,
                help="Client certificate (PEM), for nodes that require one "
                "[env SHARDCRON_TLS_CERT].",
            ),
            click.option(
                "--tls-key",
                envvar=TLS_KEY_ENV,
                type=PEM_FILE,
                help="The client certificate's key (PEM) [env SHARDCRON_TLS_KEY].",
            ),
        ),
    )


def server_tls_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the serving side's TLS flags; the command gets ``server_tls`` and ``insecure``."""
    return _built_into(
        f,
        "server_tls",
        _server_tls,
        (
            click.option(
                "--tls-cert",
                type=PEM_FILE,
                help="Serve gRPC and HTTP with TLS: this node's certificate (PEM; it also presents "
                "it to the nodes it calls).",
            ),
            click.option("--tls-key", type=PEM_FILE, help="The certificate's private key (PEM)."),
            click.option(
                "--tls-client-ca",
                type=PEM_FILE,
                help="Require client certificates signed by this CA (mTLS).",
            ),
            click.option(
                "--tls-ca",
                type=PEM_FILE,
                help="Verify the nodes this one calls (and its in-process workers' node) "
                "against this CA (default: the system's roots).",
            ),
            click.option(
                "--insecure",
                is_flag=True,
                help="Allow serving plaintext on an address that is not loopback.",
            ),
        ),
    )
