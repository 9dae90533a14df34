"""FileBlobStore: blobs as files under one directory (``file:///path``), local or shared.

The blob ``a/b/c`` is the file ``ROOT/a/b/c``: a 48-byte header (a magic string,
whether a digest is kept, the sha256), then the blob's bytes. Folders are made as
writes need them and removed by the deletes that empty them.

Writes are staged in ``ROOT/.staging/`` (no key can name it: a segment starts with a
letter or digit), fsynced, then put in place and the folder fsynced: ``put`` renames
the staged file onto the key's path, so of two writers the last rename wins and a
reader opens an old whole file or a new whole one; ``put_if_absent`` hard-links it
there instead, which never replaces a file, so exactly one of racing writers, in
this process or in any other sharing the directory, stores its bytes. A write whose
folder a concurrent delete removed makes it again. Staged files a crashed writer
left are removed by a later ``open`` once a day old.

No path leaves the root: keys have no ``..`` segment (``shardcron.blobs.keys``), and
every path is walked from the root's descriptor one segment at a time with
``O_NOFOLLOW``, so a symbolic link planted in the tree is never followed: a read
through one finds no blob, a write through one fails.

Every file-system call runs in a thread (``asyncio.to_thread``), never on the event
loop; a streamed write goes to its file a batch of at most 1 MiB (or one larger
chunk) at a time, and a read yields at most ``READ_CHUNK`` a step. Any ``OSError``
is raised as ``BlobStoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import stat
import struct
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shardcron.blobs.errors import (
    BlobDigestMismatch,
    BlobNotFound,
    BlobStoreUnavailable,
    InvalidBlobKey,
)
from shardcron.blobs.keys import (
    check_folder,
    check_key,
    check_sha256,
    encode_page_token,
    is_segment,
)
from shardcron.blobs.store import (
    MAX_LIST_PAGE,
    READ_CHUNK,
    BlobEntry,
    BlobInfo,
    BlobReader,
    ByteRange,
    Written,
    check_listing,
    exists,
)
from shardcron.client.limits import clip
from shardcron.client.types import Page

HEADER = struct.Struct(">8sB7x32s")  # magic, flags, reserved, sha256
MAGIC = b"scblob01"
_HAS_SHA256 = 1
STAGING = ".staging"
STALE_STAGED_SECONDS = 24 * 3600
WRITE_BATCH = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PUBLISH_TRIES = 20  # times a write makes its folder again after a delete removed it
_NO_FOLDER = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


class FileBlobStore:
    """Blobs under ``root``, an absolute directory path (made by ``open`` if missing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        if not self.root.is_absolute():
            raise ValueError(f"root: {root!s} is not an absolute path")
        self.url = self.root.as_uri()
        self._root_fd: int | None = None
        self._staging_fd: int | None = None

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        if self._root_fd is None:
            await self._call("open", "", self._open_sync)

    async def close(self) -> None:
        fds, self._root_fd, self._staging_fd = (self._root_fd, self._staging_fd), None, None
        for fd in fds:
            if fd is not None:
                os.close(fd)

    def _open_sync(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(STAGING, 0o700, dir_fd=root_fd)
            staging_fd = os.open(STAGING, _DIR_FLAGS, dir_fd=root_fd)
        except BaseException:
            os.close(root_fd)
            raise
        stale = time.time() - STALE_STAGED_SECONDS
        with os.scandir(staging_fd) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat(follow_symlinks=False).st_mtime < stale:
                        os.unlink(entry.name, dir_fd=staging_fd)
        self._root_fd, self._staging_fd = root_fd, staging_fd

    # --- writes ---------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        self._check_open()
        await self._call("write", key, self._put_sync, key, data, True)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        self._check_open()
        return await self._call("write", key, self._put_sync, key, data, False)

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        sha256: str | None = None,
        if_absent: bool = False,
    ) -> Written | None:
        check_key(key)
        if sha256 is not None:
            check_sha256(sha256)
        self._check_open()
        if if_absent and await exists(self, key):
            return None
        staged = await self._call("write", key, _Staged, self._staging_fd)
        try:
            batch = bytearray()
            async for chunk in chunks:
                batch += chunk
                if len(batch) >= WRITE_BATCH:
                    full, batch = batch, bytearray()
                    await self._call("write", key, staged.write, full)
            if batch:
                await self._call("write", key, staged.write, batch)
            got = staged.hash.hexdigest()
            if sha256 is not None and got != sha256:
                raise BlobDigestMismatch(sha256, got)
            stored = await self._call(
                "write", key, self._seal_and_publish, staged, key, sha256 is not None, not if_absent
            )
            return Written(size=staged.size, sha256=got) if stored else None
        finally:
            await asyncio.to_thread(staged.discard)

    def _put_sync(self, key: str, data: bytes, replace: bool) -> bool:
        staged = _Staged(self._staging_fd)
        try:
            staged.write(data)
            return self._seal_and_publish(staged, key, True, replace)
        finally:
            staged.discard()

    def _seal_and_publish(
        self, staged: _Staged, key: str, keep_sha256: bool, replace: bool
    ) -> bool:
        """Puts the sealed staged file at ``key``: True when it is there now, False when
        (not ``replace``) a blob already was."""
        staged.seal(keep_sha256=keep_sha256)
        *folders, name = key.split("/")
        for _ in range(_PUBLISH_TRIES):
            try:
                parent = self._folder(folders, create=True)
            except FileNotFoundError:
                continue  # a delete removed a folder on the way as it was made
            except NotADirectoryError:
                raise _blob_on_the_way(key) from None
            try:
                if replace:
                    os.rename(staged.name, name, src_dir_fd=staged.dir, dst_dir_fd=parent)
                else:
                    os.link(staged.name, name, src_dir_fd=staged.dir, dst_dir_fd=parent)
                os.fsync(parent)
                return True
            except FileExistsError:
                if replace:
                    raise
                return False
            except FileNotFoundError:
                continue  # the folder was removed (emptied by a delete) before the rename
            except IsADirectoryError:
                raise _blob_on_the_way(key) from None
            finally:
                os.close(parent)
        raise OSError(errno.EAGAIN, f"its folder was removed {_PUBLISH_TRIES} times as it was made")

    # --- reads --------------------------------------------------------------

    async def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        check_key(key)
        self._check_open()
        return await self._call("read", key, self._get_sync, key, byte_range or ByteRange())

    async def get_stream(self, key: str, byte_range: ByteRange | None = None) -> BlobReader:
        check_key(key)
        self._check_open()
        fd, info = await self._call("read", key, self._open_blob, key)
        try:
            start, end = (byte_range or ByteRange()).resolve(info.size)
        except BaseException:
            os.close(fd)
            raise
        chunks = self._chunks(fd, key, start, end)

        async def close() -> None:
            await chunks.aclose()
            os.close(fd)

        return BlobReader(info=info, start=start, end=end, chunks=chunks, close=close)

    async def head(self, key: str) -> BlobInfo:
        check_key(key)
        self._check_open()
        return await self._call("read", key, self._head_sync, key)

    async def list(
        self, prefix: str = "", *, page_size: int = MAX_LIST_PAGE, page_token: str = ""
    ) -> Page[BlobEntry]:
        after = check_listing(prefix, page_size, page_token)
        self._check_open()
        items, more = await self._call("list", prefix, self._list_sync, prefix, after, page_size)
        token = encode_page_token(items[-1].key) if more and items else ""
        return Page(items=items, next_page_token=token)

    async def _chunks(self, fd: int, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        offset = start
        while offset < end:
            data = await self._call(
                "read", key, _pread, fd, HEADER.size + offset, min(READ_CHUNK, end - offset)
            )
            if not data:
                raise BlobStoreUnavailable(f"{self.url}: {clip(key, 200)!r} shrank as it was read")
            offset += len(data)
            yield data

    def _get_sync(self, key: str, byte_range: ByteRange) -> bytes:
        fd, info = self._open_blob(key)
        try:
            start, end = byte_range.resolve(info.size)
            return _pread(fd, HEADER.size + start, end - start)
        finally:
            os.close(fd)

    def _head_sync(self, key: str) -> BlobInfo:
        fd, info = self._open_blob(key)
        os.close(fd)
        return info

    def _open_blob(self, key: str) -> tuple[int, BlobInfo]:
        """An open descriptor of the blob's file and what its header and size say."""
        *folders, name = key.split("/")
        parent = self._folder(folders, create=False)
        if parent is None:
            raise BlobNotFound(key)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as e:
            if e.errno in _NO_FOLDER:
                raise BlobNotFound(key) from None
            raise
        finally:
            os.close(parent)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BlobNotFound(key)
            magic, flags, digest = _header(_pread(fd, 0, HEADER.size))
            if magic != MAGIC:
                raise BlobStoreUnavailable(f"{self.url}: {clip(key, 200)!r} is not a blob file")
            info = BlobInfo(
                key=key,
                size=st.st_size - HEADER.size,
                modified_at=datetime.fromtimestamp(st.st_mtime, UTC),
                sha256=digest.hex() if flags & _HAS_SHA256 else None,
            )
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    def _list_sync(self, prefix: str, after: str, page_size: int) -> tuple[list[BlobEntry], bool]:
        """Up to ``page_size`` blobs under ``prefix`` after ``after``, and whether more follow."""
        folders, _, _ = prefix.rpartition("/")
        fd = self._folder(folders.split("/") if folders else [], create=False)
        if fd is None:
            return [], False
        found: list[BlobEntry] = []
        walk = self._walk(fd, f"{folders}/" if folders else "", prefix, after)
        try:
            for entry in walk:
                if len(found) == page_size:
                    return found, True
                found.append(entry)
        finally:
            walk.close()
            os.close(fd)
        return found, False

    def _walk(self, fd: int, base: str, prefix: str, after: str) -> Iterator[BlobEntry]:
        """The blobs under the folder ``fd`` (whose keys start with ``base``) that start
        with ``prefix`` and come after ``after``, in key order: a folder ``x`` sorts as
        ``x/``, which is where its keys sort among its files' names."""
        with os.scandir(fd) as scan:
            entries = sorted(
                (entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name, entry)
                for entry in scan
                if is_segment(entry.name)
                and (entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False))
            )
        for name, entry in entries:
            path = base + name
            if name.endswith("/"):
                if not (path.startswith(prefix) or prefix.startswith(path)):
                    continue
                if path < after and not after.startswith(path):
                    continue  # every key under it sorts before ``after``
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue  # removed since it was listed
                try:
                    yield from self._walk(child, path, prefix, after)
                finally:
                    os.close(child)
            elif path > after and path.startswith(prefix):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_size >= HEADER.size:
                    yield BlobEntry(
                        key=path,
                        size=st.st_size - HEADER.size,
                        modified_at=datetime.fromtimestamp(st.st_mtime, UTC),
                    )

    # --- deletes ------------------------------------------------------------

    async def delete(self, key: str) -> None:
        check_key(key)
        self._check_open()
        await self._call("delete", key, self._delete_sync, key)

    async def delete_prefix(self, prefix: str) -> int:
        check_folder(prefix)
        self._check_open()
        return await self._call("delete", prefix, self._delete_prefix_sync, prefix)

    def _delete_sync(self, key: str) -> None:
        *folders, name = key.split("/")
        parent = self._folder(folders, create=False)
        if parent is None:
            return
        try:
            os.unlink(name, dir_fd=parent)
            os.fsync(parent)
        except (FileNotFoundError, IsADirectoryError):
            return
        finally:
            os.close(parent)
        self._prune(folders)

    def _delete_prefix_sync(self, prefix: str) -> int:
        folders = prefix[:-1].split("/")
        fd = self._folder(folders, create=False)
        if fd is None:
            return 0
        try:
            count = _empty(fd)
        finally:
            os.close(fd)
        self._prune(folders)
        return count

    def _prune(self, folders: Sequence[str]) -> None:
        """Removes the folders of ``folders``, deepest first, while they are empty."""
        for depth in range(len(folders), 0, -1):
            parent = self._folder(folders[: depth - 1], create=False)
            if parent is None:
                continue
            try:
                os.rmdir(folders[depth - 1], dir_fd=parent)
            except FileNotFoundError:
                continue
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    return
                raise
            finally:
                os.close(parent)

    # --- helpers --------------------------------------------------------------

    def _folder(self, folders: Sequence[str], *, create: bool) -> int | None:
        """An open descriptor of ``ROOT/folders...``, walked without following links;
        made as needed when ``create``, else None when it is not there."""
        assert self._root_fd is not None
        fd = os.dup(self._root_fd)
        try:
            for name in folders:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if not create and e.errno in _NO_FOLDER:
                        os.close(fd)
                        return None
                    if e.errno != errno.ENOENT:
                        raise
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    else:
                        os.fsync(fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return fd

    def _check_open(self) -> None:
        if self._root_fd is None:
            raise RuntimeError(f"{self.url}: the blob store is not open")

    async def _call(self, action: str, key: str, fn: Callable[..., Any], /, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except OSError as e:
            raise BlobStoreUnavailable(
                f"{self.url}: cannot {action} {clip(key, 200)!r}: {e.strerror or e}"
            ) from e


class _Staged:
    """A blob being written: a new file in the staging folder, a header's room first."""

    def __init__(self, staging_fd: int | None) -> None:
        assert staging_fd is not None
        self.dir = staging_fd
        self.name = f"{uuid.uuid4().hex}.part"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        self.fd: int | None = os.open(self.name, flags, 0o644, dir_fd=staging_fd)
        self.size = 0
        self.hash = hashlib.sha256()
        self.write_all(bytes(HEADER.size))

    def write(self, data: bytes | bytearray) -> None:
        self.hash.update(data)
        self.size += len(data)
        self.write_all(data)

    def write_all(self, data: bytes | bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def seal(self, *, keep_sha256: bool) -> None:
        """Writes the header and makes the file durable."""
        digest = self.hash.digest() if keep_sha256 else bytes(32)
        os.pwrite(self.fd, HEADER.pack(MAGIC, _HAS_SHA256 if keep_sha256 else 0, digest), 0)
        os.fsync(self.fd)

    def discard(self) -> None:
        """Closes the file and removes its staged name (gone already once renamed)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name, dir_fd=self.dir)


def _pread(fd: int, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes at ``offset``: fewer only at the end of the file."""
    parts = []
    while size > 0:
        data = os.pread(fd, size, offset)
        if not data:
            break
        parts.append(data)
        offset += len(data)
        size -= len(data)
    return b"".join(parts)


def _header(raw: bytes) -> tuple[bytes, int, bytes]:
    if len(raw) < HEADER.size:
        return b"", 0, b""
    return HEADER.unpack(raw)


def _empty(fd: int) -> int:
    """Removes everything under the folder ``fd`` (not following links); how many files."""
    count = 0
    with os.scandir(fd) as scan:
        entries = list(scan)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue
            try:
                count += _empty(child)
            finally:
                os.close(child)
            with contextlib.suppress(OSError):  # gone, or written to meanwhile
                os.rmdir(entry.name, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=fd)
                count += 1
    return count


def _blob_on_the_way(key: str) -> InvalidBlobKey:
    return InvalidBlobKey("key", f"{clip(key)!r}: a blob and a folder of blobs would share a name")
