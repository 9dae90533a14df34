"""The blob store options of ``dev`` and ``node``, declared once, handed over as one
``BlobOptions``: where runs' whole output goes (``--blob-store URL``: ``file:///path``
or ``s3://bucket/prefix``), how to reach an S3 store (``--blob-endpoint``,
``--blob-region``, and the two files holding its keys: never a secret in argv; each
also from its ``SHARDCRON_BLOB_*`` variable, ``BlobStoreOptions.from_env``), and how
much of one run's output is kept (``--output-limit``), and how large jobs' code
archives may be and how long one no job names is kept (``--artifact-max-bytes``,
``--artifact-max-unpacked-bytes``, ``--artifact-max-entries``, ``--artifact-grace``).
``dev`` keeps blobs under its
data dir unless told otherwise; a ``node`` without ``--blob-store`` keeps each run's
output tail in the job store alone, as before there was a blob store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import click

from shardcron.blobs.archives import MAX_ARCHIVE_BYTES, ArchiveLimits
from shardcron.blobs.s3_options import BlobStoreOptions
from shardcron.blobs.store import BlobStore
from shardcron.blobs.urls import blob_store_for
from shardcron.client.cli.params import DURATION
from shardcron.coordinator.artifact_retention import DEFAULT_GRACE
from shardcron.coordinator.output_blobs import DEFAULT_LIMIT_BYTES, MAX_LIMIT_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class BlobOptions:
    url: str  # "": none
    options: BlobStoreOptions
    output_limit: int  # bytes of one run's output kept in the blob store
    artifact_limits: ArchiveLimits = ArchiveLimits()  # jobs' code archives, sent and unpacked
    artifact_grace: timedelta = DEFAULT_GRACE  # an artifact no job names is kept this long

    def store(self, data_dir: Path | None = None) -> BlobStore | None:
        """The store named (unopened); with no URL, one under ``data_dir`` (``dev``)
        or none. A URL or option that cannot work raises ``click.BadParameter``."""
        url = self.url or (f"file://{(data_dir / 'blobs').resolve()}" if data_dir else "")
        if not url:
            return None
        try:
            return blob_store_for(url, self.options)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--blob-store") from None


def blob_options(dev: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of the module docstring; the command receives ``blobs``."""
    where = "[DATA_DIR/blobs]" if dev else "[none: the job store keeps each run's tail]"
    options = [
        click.option(
            "--blob-store",
            default="",
            help=f"Where runs' whole output is kept: file:///path or s3://bucket/prefix {where}.",
        ),
        click.option("--blob-endpoint", default=None, help="An S3-compatible service's URL."),
        click.option("--blob-region", default=None, help="The S3 region."),
        click.option(
            "--blob-access-key-file",
            default=None,
            type=click.Path(dir_okay=False),
            help="File holding the S3 access key id.",
        ),
        click.option(
            "--blob-secret-key-file",
            default=None,
            type=click.Path(dir_okay=False),
            help="File holding the S3 secret key.",
        ),
        click.option(
            "--output-limit",
            default=DEFAULT_LIMIT_BYTES,
            show_default=True,
            type=click.IntRange(0, MAX_LIMIT_BYTES),
            help="Bytes of one run's output kept in the blob store; the rest is cut, and said.",
        ),
        click.option(
            "--artifact-max-bytes",
            default=ArchiveLimits().compressed_bytes,
            show_default=True,
            type=click.IntRange(1, MAX_ARCHIVE_BYTES),
            help="The largest code archive a job may ship, as uploaded.",
        ),
        click.option(
            "--artifact-max-unpacked-bytes",
            default=ArchiveLimits().unpacked_bytes,
            show_default=True,
            type=click.IntRange(1),
            help="The most bytes a code archive's files may hold, unpacked.",
        ),
        click.option(
            "--artifact-max-entries",
            default=ArchiveLimits().entries,
            show_default=True,
            type=click.IntRange(1),
            help="The most entries (files, directories, links) a code archive may hold.",
        ),
        click.option(
            "--artifact-grace",
            default="1h",
            show_default=True,
            type=DURATION,
            help="How long after its upload a code archive no job names is kept.",
        ),
    ]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        def command(**kwargs: Any) -> Any:
            try:
                options = BlobStoreOptions.from_env(
                    endpoint=kwargs.pop("blob_endpoint"),
                    region=kwargs.pop("blob_region"),
                    access_key_file=kwargs.pop("blob_access_key_file"),
                    secret_key_file=kwargs.pop("blob_secret_key_file"),
                )
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="--blob-*") from None
            blobs = BlobOptions(
                url=kwargs.pop("blob_store"),
                options=options,
                output_limit=kwargs.pop("output_limit"),
                artifact_limits=ArchiveLimits(
                    compressed_bytes=kwargs.pop("artifact_max_bytes"),
                    unpacked_bytes=kwargs.pop("artifact_max_unpacked_bytes"),
                    entries=kwargs.pop("artifact_max_entries"),
                ),
                artifact_grace=kwargs.pop("artifact_grace"),
            )
            return f(blobs=blobs, **kwargs)

        functools.update_wrapper(command, f)
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
