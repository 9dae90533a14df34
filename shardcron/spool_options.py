"""The output spool options of ``dev`` and ``worker``, declared once, handed over as one
``OutputSpoolConfig`` (``worker/output_spool.py``): how much of its runs' output a
worker keeps on its disk while its node cannot write it to the blob store
(``--output-spool-bytes``; 0: none, the node cuts such output instead), where
(``--output-spool-dir``; ``dev``: under its data dir, one directory per in-process
worker), and how long a run's result waits for its kept output to be sent
(``--output-drain-wait``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from shardcron.role_commands import duration_option
from shardcron.worker.output_spool import (
    DEFAULT_DRAIN_WAIT,
    DEFAULT_LIMIT_BYTES,
    OutputSpoolConfig,
)


def output_spool_options(dev: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of the module docstring; the command receives ``output_spool``."""
    where = "[DATA_DIR/spool/WORKER]" if dev else "[TMPDIR/shardcron-spool-UID]"
    options = [
        click.option(
            "--output-spool-bytes",
            default=DEFAULT_LIMIT_BYTES,
            show_default=True,
            type=click.IntRange(0),
            help="Bytes of runs' output a worker keeps on disk while the blob store is down"
            " (0: none: such output is cut).",
        ),
        click.option(
            "--output-drain-wait",
            default=f"{DEFAULT_DRAIN_WAIT:g}s",
            show_default=True,
            callback=duration_option,
            help="How long a run's result waits for its kept output to be sent; the rest"
            " is cut, and said.",
        ),
    ]
    if not dev:
        options.append(
            click.option(
                "--output-spool-dir",
                default=None,
                type=click.Path(file_okay=False),
                help=f"Where a worker keeps runs' output while the blob store is down {where}.",
            )
        )

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        def command(**kwargs: Any) -> Any:
            directory = kwargs.pop("output_spool_dir", None)
            spool = OutputSpoolConfig(
                directory=Path(directory) if directory else None,
                limit_bytes=kwargs.pop("output_spool_bytes"),
                drain_wait=kwargs.pop("output_drain_wait").total_seconds(),
            )
            return f(output_spool=spool, **kwargs)

        functools.update_wrapper(command, f)
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
