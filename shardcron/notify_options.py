"""The command-line options of a node's webhook notifications, declared once for
``dev`` and ``node`` (docs/notifications.md): ``--notify-allow-private`` (webhooks on
loopback, link-local and private addresses) and ``--notify-secrets`` (the owners'
signing secrets), handed over as one ``NotifyConfig``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def notify_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the module docstring; the command receives ``notify``."""
    options = [
        click.option(
            "--notify-allow-private",
            is_flag=True,
            help="Let job notifications call webhooks on loopback, link-local and private "
            "addresses (refused by default, so jobs cannot reach the node's own network).",
        ),
        click.option(
            "--notify-secrets",
            type=click.Path(dir_okay=False, exists=True),
            default=None,
            help="TOML file whose [secrets] table maps an owner to the secret its "
            "notifications are signed with (X-Shardcron-Signature).",
        ),
    ]

    def command(**kwargs: Any) -> Any:
        # the server's modules, imported when a server starts (the CLI's start stays quick)
        from shardcron.coordinator.notify.sender import NotifyConfig
        from shardcron.coordinator.notify.signing import load_secrets

        path = kwargs.pop("notify_secrets")
        try:
            secrets = load_secrets(Path(path)) if path else {}
        except (OSError, ValueError) as e:
            raise click.BadParameter(str(e), param_hint="--notify-secrets") from None
        notify = NotifyConfig(allow_private=kwargs.pop("notify_allow_private"), secrets=secrets)
        return f(notify=notify, **kwargs)

    functools.update_wrapper(command, f)
    for option in reversed(options):
        command = option(command)
    return command
