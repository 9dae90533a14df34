"""The blob stores the tests run against: a directory, and a real S3-compatible service.

The S3 service is one Versity S3 gateway per test session (``deploy.VersityGateway``,
built by ``python3 -m deploy fetch versitygw`` or on first use), started on a free
port by the ``s3_gateway`` fixture of ``tests/conftest.py`` on its first use, with
the bucket ``BUCKET``, and stopped at the session's end. It fails, never skips,
when it cannot start. Each store a test makes on it has a prefix of its own
(``t-<uuid>``), so tests never see each other's blobs: the chroot of the ZooKeeper
tests. Its credentials come from the gateway's key files, as a deployment's would.

``BACKENDS`` names a function per implementation that makes an unopened store on
one location of the test (the same location each call, so a test can reopen it);
``tests/test_blob_store_contract.py`` runs every test on each.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy import VersityGateway
from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.s3 import S3BlobStore
from shardcron.blobs.s3_options import MIN_PART_SIZE, BlobStoreOptions
from shardcron.blobs.store import BlobStore

BUCKET = "shardcron-test"
PART_SIZE = MIN_PART_SIZE  # the smallest S3 takes: multipart uploads at a few MiB


def gateway_options(gateway: VersityGateway, **overrides: Any) -> BlobStoreOptions:
    """Options that reach ``gateway`` with its root key pair, read from its key files."""
    values: dict[str, Any] = {
        "endpoint": gateway.endpoint,
        "region": "us-east-1",
        "access_key_file": gateway.access_key_file,
        "secret_key_file": gateway.secret_key_file,
        "part_size": PART_SIZE,
        "attempts": 2,
    }
    return BlobStoreOptions(**{**values, **overrides})


StoreMaker = Callable[[], BlobStore]


def file_backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    return lambda: FileBlobStore(tmp_path / "blobs")


def s3_backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    gateway: VersityGateway = request.getfixturevalue("s3_gateway")
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    return lambda: S3BlobStore(BUCKET, prefix, gateway_options(gateway))


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], StoreMaker]] = {
    "file": file_backend,
    "s3": s3_backend,
}


@dataclass(frozen=True)
class Stream:
    """Deterministic bytes, made a chunk at a time: ``size`` bytes from ``seed``."""

    size: int
    seed: int = 7
    chunk: int = 256 << 10

    async def chunks(self) -> AsyncIterator[bytes]:
        rng = random.Random(self.seed)
        left = self.size
        while left:
            n = min(self.chunk, left)
            yield rng.randbytes(n)
            left -= n

    def sha256(self) -> str:
        digest = hashlib.sha256()
        rng = random.Random(self.seed)
        left = self.size
        while left:
            n = min(self.chunk, left)
            digest.update(rng.randbytes(n))
            left -= n
        return digest.hexdigest()

    def data(self) -> bytes:
        """The whole stream at once (for small ones)."""
        rng = random.Random(self.seed)
        parts = []
        left = self.size
        while left:
            n = min(self.chunk, left)
            parts.append(rng.randbytes(n))
            left -= n
        return b"".join(parts)
