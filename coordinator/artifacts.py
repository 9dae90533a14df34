"""Jobs' code archives in the blob store: uploaded once per owner and digest, checked
before they are stored, read back for the worker that holds a run's lease.

An upload (``Artifacts.upload``) is spooled to a temporary file (in memory up to
``SPOOL_IN_MEMORY``, on disk past it) while its sha256 is computed, within the size
it announced and the node's ``ArchiveLimits``; the archive is then checked entry by
entry (``shardcron.blobs.archives``, in a thread) and only then written, under
``artifacts/<owner>/<sha256>`` with ``if_absent``: the same bytes sent again, by
anyone of that owner, are stored once. A refused upload stores nothing.

A job names its artifact by digest (``CommandTask.artifact``); a create or update
naming one its owner has not uploaded is refused (``require``). A worker reads one
through the node whose poller holds the run's lease (``WorkerStreamServicer``),
which asks the poller (``Poller.artifact_of``) before it opens the blob.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import IO

from shardcron.blobs.archives import ArchiveLimits, check_archive
from shardcron.blobs.layout import artifact_key
from shardcron.blobs.store import BlobReader, BlobStore, exists
from shardcron.client.errors import InvalidArgument

CHUNK = 1 << 20  # the largest piece of an upload or a read, in bytes
SPOOL_IN_MEMORY = 8 << 20  # an upload's bytes held in memory before they go to disk


@dataclass(frozen=True, slots=True, kw_only=True)
class Uploaded:
    sha256: str
    size: int
    stored: bool  # False: the owner had these bytes already


class Artifacts:
    """The owners' artifacts in ``store``, bounded by ``limits``."""

    def __init__(self, store: BlobStore, limits: ArchiveLimits | None = None) -> None:
        self.store = store
        self.limits = limits or ArchiveLimits()

    async def upload(
        self, owner: str, size: int, sha256: str, chunks: AsyncIterable[bytes]
    ) -> Uploaded:
        """Stores the archive of ``size`` bytes in ``chunks`` (with the digest
        ``sha256`` when given, else any) for ``owner``, once checked."""
        most = self.limits.compressed_bytes
        if not 1 <= size <= most:
            raise InvalidArgument("size", f"must be in [1, {most}] bytes, got {size}")
        if sha256:
            artifact_key(owner, sha256)  # its form, before any byte is read
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
            digest = await _spool(chunks, spool, size)
            if sha256 and digest != sha256:
                raise InvalidArgument("sha256", f"the bytes' sha256 is {digest}, not {sha256}")
            key = artifact_key(owner, digest)
            if await exists(self.store, key):
                return Uploaded(sha256=digest, size=size, stored=False)
            spool.seek(0)
            await asyncio.to_thread(check_archive, spool, self.limits)
            spool.seek(0)
            written = await self.store.put_stream(key, _read(spool), sha256=digest, if_absent=True)
        return Uploaded(sha256=digest, size=size, stored=written is not None)

    async def require(self, owner: str, sha256: str, field: str) -> None:
        """``InvalidArgument`` naming ``field`` unless ``owner`` uploaded ``sha256``."""
        if not await exists(self.store, artifact_key(owner, sha256)):
            raise InvalidArgument(field, f"no artifact {sha256} of this owner: upload it first")

    async def open(self, owner: str, sha256: str) -> BlobReader:
        """An open read of the owner's artifact (``BlobNotFound`` when gone)."""
        return await self.store.get_stream(artifact_key(owner, sha256))


async def _spool(chunks: AsyncIterable[bytes], spool: IO[bytes], size: int) -> str:
    """Writes ``chunks`` to ``spool``, exactly ``size`` bytes; their sha256."""
    digest = hashlib.sha256()
    got = 0
    async for chunk in chunks:
        if len(chunk) > CHUNK:
            raise InvalidArgument("data", f"at most {CHUNK} bytes per message, got {len(chunk)}")
        got += len(chunk)
        if got > size:
            raise InvalidArgument("data", f"more bytes than the {size} announced")
        digest.update(chunk)
        spool.write(chunk)
    if got != size:
        raise InvalidArgument("size", f"{size} bytes announced, {got} sent")
    return digest.hexdigest()


async def _read(spool: IO[bytes]) -> AsyncIterator[bytes]:
    while chunk := spool.read(CHUNK):
        yield chunk
