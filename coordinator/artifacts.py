"""Jobs' code archives in the blob store: uploaded once per owner and digest, checked
before they are stored, read back for the worker that holds a run's lease.

An upload (``Artifacts.upload``) is spooled to a temporary file (in memory up to
``SPOOL_IN_MEMORY``, on disk past it) while its sha256 is computed, within the size
it announced and the node's ``ArchiveLimits``; the archive is then checked entry by
entry (``shardcron.blobs.archives``, in a thread) and only then written, under
``artifacts/<owner>/<sha256>`` with ``if_absent``: the same bytes sent again, by
anyone of that owner, are stored once. A refused upload stores nothing.

A job names its artifact by digest (``CommandTask.artifact``); a create or update
naming one its owner has not uploaded is refused (``require_artifacts``), and the
store records that the job refers to it before the job is written (``record_refs``). A worker reads one
through the node whose poller holds the run's lease (``WorkerStreamServicer``),
which asks the poller (``Poller.artifact_of``) before it opens the blob.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import IO

from shardcron.blobs.archives import ArchiveLimits, check_archive
from shardcron.blobs.layout import artifact_key
from shardcron.blobs.store import BlobReader, BlobStore, exists
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import CommandTask, Job, JobSpec
from shardcron.coordinator.store import ArtifactRef, JobStore

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


async def require_artifacts(
    artifacts: Artifacts | None, owner: str, specs: Sequence[tuple[JobSpec, str]]
) -> None:
    """Refuses, naming its field (``<spec field>.task.command.artifact``), an artifact
    ``owner`` has not uploaded, each digest looked up once: a job never names code its
    worker could not fetch. ``artifacts`` None: the node keeps no blob store."""
    seen: set[str] = set()
    for spec, spec_field in specs:
        task = spec.task
        if not isinstance(task, CommandTask) or not task.artifact or task.artifact in seen:
            continue
        field = f"{spec_field}.task.command.artifact"
        if artifacts is None:
            raise InvalidArgument(field, "this node keeps no blob store: no artifacts")
        await artifacts.require(owner, task.artifact, field)
        seen.add(task.artifact)


async def record_refs(store: JobStore, owner: str, jobs: Sequence[Job]) -> None:
    """Records which of ``jobs`` name an artifact, before they are written: the sweep
    of artifacts no job refers to (``artifact_retention``) reads these, and never
    deletes one a job names."""
    refs = [
        ArtifactRef(owner=owner, sha256=job.spec.task.artifact, job_id=job.id)
        for job in jobs
        if isinstance(job.spec.task, CommandTask) and job.spec.task.artifact
    ]
    if refs:
        await store.add_artifact_refs(refs)


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
