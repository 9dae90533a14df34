"""A job's code archive: what makes one safe to store, and so to unpack on a worker.

An artifact is a tar archive, plain or compressed (gzip, bzip2, xz: whatever
``tarfile`` opens with ``r:*``). Before a node stores one, ``check_archive`` reads
every entry's header (not its bytes) and refuses the archive, with ``InvalidArgument``
on the field ``artifact`` naming the entry, when an entry would land outside the
directory it is unpacked into or be anything but a file, a directory or a link within
it: Python's own extraction filter (``tarfile.data_filter``) decides that, the one the
worker's supervisor unpacks with, and a ``..`` path component is refused outright even
where it would resolve inside. An archive with more entries, or more unpacked bytes,
than its ``ArchiveLimits`` is refused the same way, naming the entry that passed the
bound: a small archive that unpacks to a huge tree is caught before it is stored.

The check's own reading is bounded too, whatever the headers claim: the decompressed
stream it reads is cut at ``unpacked_bytes`` plus ``HEADER_ALLOWANCE`` per entry, and
no single header (a GNU long name, a pax header) may pass ``MAX_HEADER_BYTES``, so a
compressed bomb hidden in a header or in an entry of an unknown type is refused after
a bounded read, not held in memory. A path or link target longer than ``PATH_MAX``
is refused.

Links are judged as they will be followed, not only as written: the check keeps the
archive's symlinks and resolves every entry's path, and every link's target, through
them (``_Tree``), so a chain of links that each look inside but together lead out
(``s -> .`` then ``esc -> s/../..``) is refused; and a path may be a symlink in one
entry only (no entry replaces a symlink or is replaced by one), so the tree the worker
unpacks is the one the check resolved.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import clip

FIELD = "artifact"  # what a refusal names, whichever call carried the archive
MIB = 1 << 20
MAX_ARCHIVE_BYTES = 1 << 40  # what a node may be told to take, at most: 1 TiB
# Where the filter pretends to unpack: never touched (nothing is written), only used to
# tell whether an entry's path and link target stay below it.
_ROOT = "/nonexistent/shardcron-artifact"
PATH_MAX = 4096  # the longest path, or link target, an entry may have (Linux's PATH_MAX)
MAX_HEADER_BYTES = 64 << 10  # the most the check reads in one go: one entry's header
HEADER_ALLOWANCE = 16 << 10  # per entry: its headers and padding, past its files' bytes
MAX_LINK_HOPS = 40  # symlinks followed resolving one path (the kernel's ELOOP bound)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveLimits:
    """How large an artifact may be: as uploaded (``compressed_bytes``), and unpacked
    (``unpacked_bytes``, the sum of its files' sizes, and ``entries``)."""

    compressed_bytes: int = 256 * MIB
    unpacked_bytes: int = 1024 * MIB
    entries: int = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveInfo:
    """What an archive that passed ``check_archive`` holds."""

    entries: int
    unpacked_bytes: int


def check_archive(fileobj: IO[bytes], limits: ArchiveLimits) -> ArchiveInfo:
    """Reads the archive in ``fileobj`` (seekable, at its start) entry by entry and
    returns what it holds; ``InvalidArgument`` naming the first entry refused."""
    entries = unpacked = 0
    tree = _Tree()
    bound = limits.unpacked_bytes + (limits.entries + 1) * HEADER_ALLOWANCE
    try:
        with (
            _decompressed(fileobj, bound) as stream,
            tarfile.open(fileobj=stream, mode="r:") as tar,
        ):
            while (member := tar.next()) is not None:
                entries += 1
                name = clip(member.name)
                if entries > limits.entries:
                    raise InvalidArgument(
                        FIELD, f"entry {name!r}: more than {limits.entries} entries"
                    )
                _check_member(member, name)
                tree.add(member, name)
                unpacked += member.size if member.isreg() else 0
                if unpacked > limits.unpacked_bytes:
                    raise InvalidArgument(
                        FIELD,
                        f"entry {name!r}: unpacked, the archive passes "
                        f"{limits.unpacked_bytes} bytes",
                    )
    except (tarfile.ReadError, EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        # a truncated or corrupt stream (gzip's own errors are OSError and EOFError)
        raise InvalidArgument(FIELD, f"not a readable tar archive: {e}") from None
    if entries == 0:
        raise InvalidArgument(FIELD, "the archive holds no entry")
    tree.check()
    return ArchiveInfo(entries=entries, unpacked_bytes=unpacked)


def _decompressed(fileobj: IO[bytes], bound: int) -> _Bounded:
    """The archive's tar stream (decompressed as its first bytes say), cut at ``bound``."""
    head = fileobj.read(6)
    fileobj.seek(0)
    for magic, opener in _DECOMPRESSORS:
        if head.startswith(magic):
            return _Bounded(opener(fileobj), bound, owned=True)
    return _Bounded(fileobj, bound, owned=False)


_DECOMPRESSORS: tuple[tuple[bytes, Callable[[IO[bytes]], IO[bytes]]], ...] = (
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    (b"BZh", lambda f: bz2.BZ2File(f, mode="rb")),
    (b"\xfd7zXZ\x00", lambda f: lzma.LZMAFile(f, mode="rb")),  # noqa: SIM115
)


class _Bounded:
    """A read-only view of a stream that refuses to read, or seek, past ``bound`` bytes,
    or to read more than ``MAX_HEADER_BYTES`` at once (the check reads headers only)."""

    def __init__(self, inner: IO[bytes], bound: int, *, owned: bool) -> None:
        self._inner = inner
        self._bound = bound
        self._owned = owned  # a decompressor over the caller's file: closed here

    def __enter__(self) -> _Bounded:
        return self

    def __exit__(self, *_: object) -> None:
        if self._owned:
            self._inner.close()  # the decompressor only: the caller's file stays open

    def _refuse_past(self, end: int) -> None:
        if end > self._bound:
            raise InvalidArgument(
                FIELD, f"unpacked, the archive passes {self._bound} bytes of tar stream"
            )

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_HEADER_BYTES:
            raise InvalidArgument(FIELD, f"an entry's header passes {MAX_HEADER_BYTES} bytes")
        self._refuse_past(self._inner.tell() + size)
        return self._inner.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0:
            raise OSError("only absolute seeks")
        self._refuse_past(offset)
        return self._inner.seek(offset)

    def tell(self) -> int:
        return self._inner.tell()


class _Tree:
    """The archive's paths as the worker will unpack them: its symlinks kept, so every
    path and link target is resolved (``resolve``) through them as the kernel will."""

    def __init__(self) -> None:
        self._links: dict[str, str] = {}  # symlink path -> its target
        self._kinds: dict[str, bool] = {}  # path -> whether it is a symlink
        self._targets: list[tuple[str, str, bool]] = []  # (name, path to resolve, is a link)

    def add(self, member: tarfile.TarInfo, name: str) -> None:
        path = _normal(member.name)
        if len(member.name.encode(errors="surrogateescape")) > PATH_MAX or (
            len(member.linkname.encode(errors="surrogateescape")) > PATH_MAX
        ):
            raise InvalidArgument(FIELD, f"entry {name!r}: a path passes {PATH_MAX} bytes")
        was_link = self._kinds.get(path)
        if was_link is not None and (was_link or member.issym()):
            raise InvalidArgument(
                FIELD, f"entry {name!r}: a symlink replaced, or replacing, an entry is refused"
            )
        self._kinds[path] = member.issym()
        if member.issym():
            self._links[path] = member.linkname
            parent = path.rpartition("/")[0]
            self._targets.append((name, f"{parent}/{member.linkname}", True))
        elif member.islnk():
            self._targets.append((name, member.linkname, True))
        self._targets.append((name, path, False))

    def check(self) -> None:
        """Refuses the first entry whose path, or link's target, resolves outside."""
        for name, path, link in self._targets:
            why = self.resolve(path)
            if why is not None:
                what = "a link that leads out of the directory" if link else "its path"
                raise InvalidArgument(FIELD, f"entry {name!r}: {what} is refused: {why}")

    def resolve(self, path: str) -> str | None:
        """Why ``path`` (below the root) resolves outside it, or too far; None if it
        stays inside."""
        queue = [p for p in reversed(path.split("/")) if p not in ("", ".")]
        out: list[str] = []
        hops = 0
        while queue:
            part = queue.pop()
            if part == "..":
                if not out:
                    return "it leads above the directory"
                out.pop()
                continue
            out.append(part)
            target = self._links.get("/".join(out))
            if target is None:
                continue
            hops += 1
            if hops > MAX_LINK_HOPS or target.startswith("/"):
                return f"more than {MAX_LINK_HOPS} links, or an absolute one, on its way"
            out.pop()
            queue.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
            if len(queue) > PATH_MAX:
                return f"its path, links followed, passes {PATH_MAX} components"
        return None


def _normal(name: str) -> str:
    return "/".join(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))


def _check_member(member: tarfile.TarInfo, name: str) -> None:
    path = member.name.replace("\\", "/")
    # the filter strips a leading '/' and keeps the entry: refused here instead
    if path.startswith("/") or (member.islnk() and member.linkname.startswith("/")):
        raise InvalidArgument(FIELD, f"entry {name!r}: an absolute path is refused")
    if ".." in path.split("/"):
        raise InvalidArgument(FIELD, f"entry {name!r}: a path with '..' is refused")
    try:
        tarfile.data_filter(member, _ROOT)
    except tarfile.AbsolutePathError:
        raise InvalidArgument(FIELD, f"entry {name!r}: an absolute path is refused") from None
    except tarfile.OutsideDestinationError:
        raise InvalidArgument(
            FIELD, f"entry {name!r}: its path leads out of the directory"
        ) from None
    except tarfile.AbsoluteLinkError:
        raise InvalidArgument(
            FIELD, f"entry {name!r}: a link to an absolute path is refused"
        ) from None
    except tarfile.LinkOutsideDestinationError:
        raise InvalidArgument(
            FIELD, f"entry {name!r}: a link that leads out of the directory is refused"
        ) from None
    except tarfile.SpecialFileError:
        raise InvalidArgument(
            FIELD, f"entry {name!r}: a device, pipe or other special file is refused"
        ) from None
    except tarfile.FilterError as e:
        raise InvalidArgument(FIELD, f"entry {name!r}: refused: {e}") from None
