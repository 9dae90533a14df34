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
"""

from __future__ import annotations

import tarfile
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
    try:
        with tarfile.open(fileobj=fileobj, mode="r:*") as tar:
            while (member := tar.next()) is not None:
                entries += 1
                name = clip(member.name)
                if entries > limits.entries:
                    raise InvalidArgument(
                        FIELD, f"entry {name!r}: more than {limits.entries} entries"
                    )
                _check_member(member, name)
                unpacked += member.size if member.isreg() else 0
                if unpacked > limits.unpacked_bytes:
                    raise InvalidArgument(
                        FIELD,
                        f"entry {name!r}: unpacked, the archive passes "
                        f"{limits.unpacked_bytes} bytes",
                    )
    except (tarfile.ReadError, EOFError, OSError) as e:
        # a truncated or corrupt stream (gzip's own errors are OSError and EOFError)
        raise InvalidArgument(FIELD, f"not a readable tar archive: {e}") from None
    if entries == 0:
        raise InvalidArgument(FIELD, "the archive holds no entry")
    return ArchiveInfo(entries=entries, unpacked_bytes=unpacked)


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
