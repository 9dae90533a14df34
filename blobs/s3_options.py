"""How to reach an S3 blob store (``BlobStoreOptions``): the endpoint of an
S3-compatible service (none: AWS), the region, and the credentials, which never
travel in a URL or a command line (where ``ps`` and logs would show them): either two
files, one holding the access key id and one the secret key (``access_key_file``,
``secret_key_file``, or ``SHARDCRON_BLOB_ACCESS_KEY_FILE`` and
``SHARDCRON_BLOB_SECRET_KEY_FILE``), read when the store opens; or, when no file is
named, botocore's own chain: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``
(and ``AWS_SESSION_TOKEN``), ``~/.aws/credentials`` and its profiles, then a
container's or an instance's role. ``BlobStoreOptions.from_env`` reads the
``SHARDCRON_BLOB_*`` variables, under what a caller's flags already set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ENV_ENDPOINT = "SHARDCRON_BLOB_ENDPOINT"
ENV_REGION = "SHARDCRON_BLOB_REGION"
ENV_ACCESS_KEY_FILE = "SHARDCRON_BLOB_ACCESS_KEY_FILE"
ENV_SECRET_KEY_FILE = "SHARDCRON_BLOB_SECRET_KEY_FILE"

MIN_PART_SIZE = 5 << 20  # S3's smallest part but the last
MAX_PART_SIZE = 512 << 20  # what one upload may hold in memory
DEFAULT_PART_SIZE = 8 << 20
MAX_CREDENTIAL_FILE = 4096
_REGION = re.compile(r"[a-z0-9-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BlobStoreOptions:
    """How to reach an ``s3://`` store; a ``file://`` store takes none of them."""

    endpoint: str | None = None  # http(s)://host[:port] of an S3-compatible service
    region: str | None = None  # None: botocore's (AWS_REGION, ~/.aws/config), else us-east-1
    access_key_file: Path | None = None
    secret_key_file: Path | None = None
    part_size: int = DEFAULT_PART_SIZE  # a multipart upload's part, held in memory
    attempts: int = 4  # tries of one request (botocore's standard retry mode)
    connect_timeout: float = 5.0  # seconds
    read_timeout: float = 60.0  # seconds without a byte from the service

    def __post_init__(self) -> None:
        if self.endpoint is not None:
            _check_endpoint(self.endpoint)
        if self.region is not None and not _REGION.fullmatch(self.region):
            raise ValueError(f"region: {self.region!r} is not a region name (us-east-1)")
        if (self.access_key_file is None) != (self.secret_key_file is None):
            raise ValueError(
                "access_key_file, secret_key_file: name both files, or neither (then the"
                " AWS_* environment and ~/.aws are read)"
            )
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ValueError(
                f"part_size: must be in [{MIN_PART_SIZE}, {MAX_PART_SIZE}] bytes,"
                f" got {self.part_size}"
            )
        if not 1 <= self.attempts <= 20:
            raise ValueError(f"attempts: must be in [1, 20], got {self.attempts}")
        for name in ("connect_timeout", "read_timeout"):
            if not 0 < getattr(self, name) <= 3600:
                raise ValueError(f"{name}: must be in (0, 3600] seconds")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: Any) -> BlobStoreOptions:
        """Options from ``given`` (a caller's flags; None: not given), then the
        ``SHARDCRON_BLOB_*`` variables of ``environ`` (default ``os.environ``)."""
        environ = os.environ if environ is None else environ
        from_env = {
            "endpoint": environ.get(ENV_ENDPOINT),
            "region": environ.get(ENV_REGION),
            "access_key_file": environ.get(ENV_ACCESS_KEY_FILE),
            "secret_key_file": environ.get(ENV_SECRET_KEY_FILE),
        }
        values = {k: v for k, v in from_env.items() if v}
        values.update({k: v for k, v in given.items() if v is not None})
        for name in ("access_key_file", "secret_key_file"):
            if name in values:
                values[name] = Path(values[name])
        return cls(**values)

    @property
    def s3_options_set(self) -> list[str]:
        """The options set that only an ``s3://`` store takes."""
        default = BlobStoreOptions()
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)]

    def credentials(self) -> tuple[str | None, str | None]:
        """The access key id and secret key from the two files (whitespace around them
        dropped), or (None, None) for botocore's chain."""
        if self.access_key_file is None or self.secret_key_file is None:
            return None, None
        return (
            _read_credential(self.access_key_file, "access_key_file"),
            _read_credential(self.secret_key_file, "secret_key_file"),
        )


def _check_endpoint(endpoint: str) -> None:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint: {endpoint!r} is not an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError("endpoint: credentials do not go in the endpoint URL")
    if parts.query or parts.fragment or parts.path not in ("", "/"):
        raise ValueError(f"endpoint: {endpoint!r}: only scheme, host and port")


def _read_credential(path: Path, field: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CREDENTIAL_FILE + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{field}: cannot read {path}: {e}") from None
    value = text.strip()
    if not value or len(text) > MAX_CREDENTIAL_FILE or any(c.isspace() for c in value):
        raise ValueError(f"{field}: {path} must hold one key on one line")
    return value
