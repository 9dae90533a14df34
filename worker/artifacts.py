"""A worker's cache of jobs' code archives, by digest: fetched once, checked each time.

A run whose command names an artifact needs its archive on this host before its
supervisor unpacks it into the run's directory. ``ArtifactCache.held`` gives the
path of a cached copy for as long as the run's start needs it: the copy is read back
and its sha256 checked every time it is taken from the cache, not only when it was
downloaded, so a copy changed on disk (a bad disk, a hand) is never unpacked. A copy
whose digest does not match is removed and fetched again, once; one fetched whose
digest does not match fails the run. Downloads go through the node that holds the
run's lease (``WorkerService.ReadArtifact``): a worker holds no blob store
credentials.

The cache is bounded in bytes: past its bound the copies used least recently (by
their modification time, moved at each use) are removed, never one a run is
starting from. One download per digest at a time: runs that need it meanwhile wait
for it. Files are this process's user's, 0600, in a 0700 directory.

A download is checked as an archive too, before it is kept (``blobs.archives``: the
node's own check, paths and links resolved through the archive's links): the worker
does not rest on the node's check alone, nor on Python's extraction filter that its
runs' supervisors unpack with (releases before 3.11.13 and 3.12.11 let some link
chains through it). A refused archive fails the run, saying which entry and why; as
the copy kept is the one checked, by digest at each use, the check is not repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from shardcron.blobs.archives import MAX_ARCHIVE_BYTES, ArchiveLimits, check_archive
from shardcron.client.errors import InvalidArgument

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 2 << 30  # 2 GiB
READ_CHUNK = 1 << 20
Download = Callable[[], AsyncIterator[bytes]]  # the archive's bytes, from the node
# The worker's check judges the tree, not the size: the node that stored the archive
# held it to the bounds it was given, which may be above the defaults.
ANY_SIZE = ArchiveLimits(
    compressed_bytes=MAX_ARCHIVE_BYTES, unpacked_bytes=MAX_ARCHIVE_BYTES, entries=10_000_000
)


class ArtifactFetchFailed(Exception):
    """The archive could not be had: the node refused or failed, or its bytes were not
    those of their digest. The run fails with this message; the worker goes on."""


class ArtifactCache:
    """Archives under ``root`` (made 0700), at most ``max_bytes`` of them in all."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("the artifact cache's size must be at least 1 byte")
        self.root = root
        self.max_bytes = max_bytes
        self.stats: Counter[str] = Counter()  # hits, downloads, tampered, evicted
        self._locks: dict[str, asyncio.Lock] = {}
        self._in_use: Counter[str] = Counter()

    def path(self, sha256: str) -> Path:
        return self.root / sha256

    @contextlib.asynccontextmanager
    async def held(self, sha256: str, download: Download) -> AsyncIterator[Path]:
        """The path of a checked copy of the archive ``sha256``, kept (never evicted)
        until the block ends; ``ArtifactFetchFailed`` when it cannot be had."""
        self._in_use[sha256] += 1
        try:
            lock = self._locks.setdefault(sha256, asyncio.Lock())
            async with lock:
                await self._ensure(sha256, download)
            yield self.path(sha256)
        finally:
            self._in_use[sha256] -= 1
            if not self._in_use[sha256]:
                del self._in_use[sha256]
                lock = self._locks.get(sha256)
                if lock is not None and not lock.locked():
                    self._locks.pop(sha256, None)

    async def _ensure(self, sha256: str, download: Download) -> None:
        path = self.path(sha256)
        began = time.monotonic()
        digest = await asyncio.to_thread(_digest_of, path)
        if digest == sha256:
            self.stats["hits"] += 1
            with contextlib.suppress(OSError):
                os.utime(path)  # used now: the last to be evicted
            log.debug("artifact %s: cached copy checked in %.3fs", sha256, time.monotonic() - began)
            return
        if digest is not None:
            self.stats["tampered"] += 1
            log.warning("cached artifact %s does not match its digest: fetched again", sha256)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        await self._download(sha256, download)
        log.debug("artifact %s: fetched and checked in %.3fs", sha256, time.monotonic() - began)
        await asyncio.to_thread(self._evict)

    async def _download(self, sha256: str, download: Download) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        staged = self.root / f".{sha256}.{uuid.uuid4().hex}.part"
        digest = hashlib.sha256()
        try:
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                async for chunk in download():
                    digest.update(chunk)
                    await asyncio.to_thread(f.write, chunk)
                await asyncio.to_thread(os.fsync, f.fileno())
            if digest.hexdigest() != sha256:
                raise ArtifactFetchFailed(
                    f"artifact {sha256}: the bytes fetched have the digest {digest.hexdigest()}"
                )
            await asyncio.to_thread(_check, staged, sha256)
            os.replace(staged, self.path(sha256))
            self.stats["downloads"] += 1
        except OSError as e:
            raise ArtifactFetchFailed(f"artifact {sha256}: cannot keep it: {e}") from e
        finally:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()

    def _evict(self) -> None:
        """Removes the least recently used copies not in use until the cache fits."""
        entries = []
        total = 0
        with os.scandir(self.root) as it:
            for entry in it:
                if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                total += st.st_size
                entries.append((st.st_mtime, entry.name, st.st_size))
        for _, name, size in sorted(entries):
            if total <= self.max_bytes:
                return
            if name in self._in_use:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / name)
                self.stats["evicted"] += 1
            total -= size


def _check(path: Path, sha256: str) -> None:
    """``ArtifactFetchFailed`` unless the archive at ``path`` passes ``check_archive``."""
    with path.open("rb") as f:
        try:
            check_archive(f, ANY_SIZE)
        except InvalidArgument as e:
            raise ArtifactFetchFailed(f"artifact {sha256}: refused: {e.reason}") from None


def _digest_of(path: Path) -> str | None:
    """The sha256 of the file at ``path``, None when there is none."""
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, OSError):
        return None
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
