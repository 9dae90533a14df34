"""How ``worker`` and ``dev`` contain the commands they run, as flags, declared once:
``--containment``, ``--run-as``, ``--run-as-range``, ``--run-dir`` and where and how
much of jobs' code archives are cached (``--artifact-cache``, ``--artifact-cache-size``),
handed over as a ``SandboxConfig``; and the check that no file holding a secret of the process (a key
file, an auth file, a token file) can be read by the users its commands run as.

``dev`` started as root runs each owner's commands as a uid of its own out of
``DEV_RUN_AS_RANGE`` unless told otherwise (``--run-as-range none``: as itself);
``worker`` runs them as itself unless given ``--run-as`` or ``--run-as-range``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from shardcron.worker.artifacts import DEFAULT_CACHE_BYTES
from shardcron.worker.containment.hosts import KINDS
from shardcron.worker.run_users import parse_uid_range, readable_by_others
from shardcron.worker.sandbox import SandboxConfig

DEV_RUN_AS_RANGE = "200000-265535"


def _range(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None or value == "none":
        return None
    try:
        return parse_uid_range(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def sandbox_options(*, dev: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The flags, handed to the command as ``sandbox`` (a ``SandboxConfig``)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(
            *args: Any,
            containment: str,
            run_as: str | None,
            run_as_range: tuple[int, int] | None,
            run_dir: str | None,
            artifact_cache: str | None,
            artifact_cache_size: int,
            **kwargs: Any,
        ) -> Any:
            if run_as is not None:
                run_as_range = None  # one user asked for by name wins over dev's default
            config = SandboxConfig(
                containment=containment,
                run_as=run_as,
                run_as_range=run_as_range,
                run_dir=Path(run_dir) if run_dir else None,
                artifact_cache=Path(artifact_cache) if artifact_cache else None,
                artifact_cache_bytes=artifact_cache_size,
            )
            return f(*args, sandbox=config, **kwargs)

        functools.update_wrapper(wrapped, f)  # with the options declared below this one
        default_range = DEV_RUN_AS_RANGE if dev and os.geteuid() == 0 else None
        for option in reversed(
            [
                click.option(
                    "--containment",
                    type=click.Choice(KINDS),
                    default="auto",
                    show_default=True,
                    help="How each command run is contained: a cgroup of its own (v2, v1), "
                    "or none (rlimits and a subreaper: its limits are not enforced).",
                ),
                click.option(
                    "--run-as",
                    metavar="USER",
                    default=None,
                    help="Run every command as USER (a name or uid; needs root).",
                ),
                click.option(
                    "--run-as-range",
                    metavar="FIRST-LAST",
                    default=default_range,
                    show_default=default_range is not None,
                    callback=_range,
                    help="Run each owner's commands as a uid of its own out of FIRST-LAST, "
                    "stable per owner on this host (needs root)"
                    + ("; 'none': as this process's user." if dev else "."),
                ),
                click.option(
                    "--run-dir",
                    type=click.Path(file_okay=False),
                    default=None,
                    help="Where the runs' private directories and the owners' uid map live "
                    "[/var/lib/shardcron/runs as root, else in the temporary directory].",
                ),
                click.option(
                    "--artifact-cache",
                    type=click.Path(file_okay=False),
                    default=None,
                    help="Where jobs' code archives are cached [RUN_DIR/artifact-cache].",
                ),
                click.option(
                    "--artifact-cache-size",
                    type=click.IntRange(min=1),
                    default=DEFAULT_CACHE_BYTES,
                    show_default=True,
                    help="The artifact cache's bound in bytes: past it, the archives used "
                    "least recently are removed.",
                ),
            ]
        ):
            wrapped = option(wrapped)
        return wrapped

    return decorate


def check_private(sandbox: SandboxConfig, files: dict[str, str | None]) -> None:
    """With commands run as other users, refuses a file of ``files`` (what it is ->
    path) that those users could read, naming it and the fix."""
    if sandbox.run_as is None and sandbox.run_as_range is None:
        return  # its commands run as this user: they read what it reads
    for what, path in files.items():
        if path and readable_by_others(path):
            raise click.ClickException(
                f"cannot start: the {what} {path} can be read by other users, the users "
                f"commands run as among them: chmod o-r {path} (or keep it in a directory "
                "they cannot enter)"
            )
