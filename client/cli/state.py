"""The state every command shares: the global options and the client made from them.

The root group puts one ``CliState`` in the click context; commands receive it through
``pass_state`` (commands added from outside find it with ``ctx.find_object(CliState)``).
The client is connected on first use, so ``--help`` and usage errors connect to nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from shardcron.client.cli.output import to_jsonable
from shardcron.client.sdk import Client
from shardcron.client.tls import ClientTls


@dataclass
class CliState:
    """The global options, and the client built from them on first use."""

    target: str
    owner: str | None
    json_output: bool
    timeout: float
    utc: bool = False  # times in UTC, not in a cron job's zone or local time
    connect: Callable[..., Client] = Client
    token: str = ""
    tls: ClientTls = ClientTls()
    # TLS files given after the subcommand, each replacing its own in ``tls``
    late_tls_ca: str | None = None
    late_tls_cert: str | None = None
    late_tls_key: str | None = None
    _client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            # the token and TLS files go only when given, so a client factory need not
            # know of them
            credentials: dict[str, Any] = {"token": self.token} if self.token else {}
            credentials.update(
                (f"tls_{name}", value)
                for name, value in (
                    ("ca", self.late_tls_ca or self.tls.ca),
                    ("cert", self.late_tls_cert or self.tls.cert),
                    ("key", self.late_tls_key or self.tls.key),
                )
                if value is not None
            )
            self._client = self.connect(
                self.target, owner=self.owner, timeout=self.timeout, **credentials
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def emit(self, value: Any, human: Callable[[], None]) -> None:
        """``value`` as one JSON document with --json, else whatever ``human`` prints."""
        if self.json_output:
            click.echo(json.dumps(to_jsonable(value), indent=2))
        else:
            human()


pass_state = click.make_pass_decorator(CliState)
