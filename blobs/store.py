"""The BlobStore seam: bytes kept by key, off the job table, behind one Protocol.

What it serves: a run's full output, written in parts while the run runs; a run's
result files; jobs' code archives, stored once per digest. Two implementations keep
the same promises (docs/blob-store.md): ``FileBlobStore`` (``file:///path``: a
directory, local or shared by every node and worker) and ``S3BlobStore``
(``s3://bucket/prefix`` on any S3-compatible service). One contract suite
(tests/test_blob_store_contract.py) runs unchanged against each; no caller may use
what only one has. ``shardcron.blobs.urls.open_blob_store`` makes either from a URL.

The promises:

- **Keys** are checked at the edge of every method, before any I/O, against the
  alphabet of ``shardcron.blobs.keys`` (``InvalidBlobKey``, naming the field); which
  keys callers build is ``shardcron.blobs.layout``. A key that is both a blob and
  the folder of others (``a/b`` and ``a/b/c``) is outside the contract: the layout
  never builds one, and a store may refuse it (``InvalidBlobKey``) or keep both.
- **Writes are whole.** A reader sees a blob's old bytes or its new ones, never a
  mix nor a part: of two writers of one key, the last to complete wins. A write
  returns once its bytes are durable (fsynced; acknowledged by S3).
  ``put_if_absent`` stores only when no blob has the key: of racing callers one
  stores, and every one of them then reads the same bytes.
- **Memory is bounded** by the caller: ``put_stream`` holds one part (S3) or one
  chunk (files) at a time, ``get_stream`` one chunk.
- **Reads take byte ranges** (``ByteRange``): from an offset, between two offsets,
  or the last N bytes, clamped to the blob's end like HTTP ranges. A range that
  starts exactly at the end reads nothing; one that starts past it raises
  ``BlobRangeNotSatisfiable`` (which says the size, so a follower knows where the
  blob ends).
- **Listings** are in key order (bytewise, as S3 lists), by pages of at most 1,000;
  a page's ``next_page_token`` is ``""`` on the last page. A page may hold fewer
  items than asked and still have a token.
- **Digests.** Every blob written through ``put`` or ``put_if_absent`` keeps the
  sha256 of its bytes, as does one written by ``put_stream`` given the digest its
  caller expects (checked as the bytes arrive: a mismatch stores nothing); ``head``
  reports it, else ``None``. ``put_stream`` returns the digest it computed either way.

Errors (``shardcron.blobs.errors``): ``InvalidBlobKey``, ``BlobNotFound``,
``BlobRangeNotSatisfiable``, ``BlobDigestMismatch``, and ``BlobStoreUnavailable``
for every failure of the backing store (its ``__cause__`` the backend's own
``OSError``, botocore or aiohttp exception). A store used before ``open`` (or after
``close``) raises ``RuntimeError`` once the keys have been checked.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from shardcron.blobs.errors import BlobNotFound, BlobRangeNotSatisfiable
from shardcron.blobs.keys import check_prefix, decode_page_token
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Page

MAX_LIST_PAGE = 1000  # S3's own bound on one listing
READ_CHUNK = 1 << 20  # what one step of a ``BlobReader`` yields at most


@dataclass(frozen=True, slots=True, kw_only=True)
class BlobEntry:
    """One blob as a listing shows it."""

    key: str
    size: int
    modified_at: datetime  # aware UTC; S3 keeps whole seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class BlobInfo:
    """One blob as ``head`` (or a read) shows it."""

    key: str
    size: int
    modified_at: datetime
    sha256: str | None  # hex; None when its writer did not know it up front


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    """What ``put_stream`` stored: its size and the sha256 of its bytes (hex)."""

    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Which bytes of a blob a read returns, half-open as Python slices are.

    ``ByteRange(start)``: from ``start`` to the end; ``ByteRange(start, end)``: bytes
    ``start`` to ``end - 1``; ``ByteRange.last(n)``: the last ``n`` bytes. ``end``
    and ``n`` past the blob's end are clamped to it. Built with negative offsets or
    ``end < start``, it raises ``InvalidArgument`` (field ``range``) at once.
    """

    start: int = 0
    end: int | None = None
    suffix: int | None = None  # the last ``suffix`` bytes; then start is 0 and end None

    def __post_init__(self) -> None:
        for name in ("start", "end", "suffix"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidArgument("range", f"{name} must be an integer >= 0, got {value!r}")
        if self.suffix is not None and (self.start or self.end is not None):
            raise InvalidArgument("range", "the last N bytes take no start or end")
        if self.end is not None and self.end < self.start:
            raise InvalidArgument("range", f"end {self.end} is before start {self.start}")

    @classmethod
    def last(cls, n: int) -> ByteRange:
        return cls(suffix=n)

    @property
    def empty(self) -> bool:
        """True when it names no byte of any blob (a read still checks the blob exists)."""
        return self.suffix == 0 or self.end == self.start

    def resolve(self, size: int) -> tuple[int, int]:
        """The ``[start, end)`` it names in a blob of ``size`` bytes; raises
        ``BlobRangeNotSatisfiable`` when it starts past the end."""
        if self.suffix is not None:
            return max(0, size - self.suffix), size
        if self.start > size:
            raise BlobRangeNotSatisfiable(self.start, size)
        return self.start, size if self.end is None else min(self.end, size)


class BlobReader:
    """One open read: ``info`` (the whole blob), ``start`` and ``end`` (the bytes it
    yields, half-open), and those bytes by ``async for``, at most ``READ_CHUNK`` a
    step. Use it as ``async with``: it holds a file or a connection until closed."""

    def __init__(
        self,
        *,
        info: BlobInfo,
        start: int,
        end: int,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self.info = info
        self.start = start
        self.end = end
        self._chunks = chunks
        self._close = close
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def read(self) -> bytes:
        """Every byte not yet yielded (``end - start`` of them when none was)."""
        return b"".join([chunk async for chunk in self._chunks])

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._close()

    async def __aenter__(self) -> BlobReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@runtime_checkable
class BlobStore(Protocol):
    """Blobs by key. Errors: see the module docstring; every method checks its keys
    before any I/O."""

    # Where the blobs are, for logs and errors: the store's URL, never a credential.
    url: str

    async def open(self) -> None:
        """Connects (S3: checks the bucket answers) or creates the root directory. Idempotent."""

    async def close(self) -> None:
        """Releases connections and files; reads not yet closed end."""

    async def put(self, key: str, data: bytes) -> None:
        """Stores ``data`` under ``key``, replacing any blob there, with its sha256."""

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """Stores ``data`` under ``key`` only if no blob has it: True when this call
        stored it. Meant for content-addressed blobs, whose racing writers hold the
        same bytes. On a service that ignores conditional writes (S3BlobStore says
        which it falls back to) two racers may both see True; the blob is whole."""

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        sha256: str | None = None,
        if_absent: bool = False,
    ) -> Written | None:
        """Stores the concatenated ``chunks`` under ``key``, holding a bounded part of
        them at a time (a large blob goes to S3 as a multipart upload).

        ``sha256``: the digest the bytes must have (hex); kept as the blob's, and a
        mismatch raises ``BlobDigestMismatch`` and stores nothing. ``if_absent``: as
        ``put_if_absent``; when a blob already has the key, returns None, possibly
        without reading ``chunks``. An exception from ``chunks`` ends the write with
        nothing stored, and propagates.
        """

    async def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """The blob's bytes, or those of ``byte_range``."""

    async def get_stream(self, key: str, byte_range: ByteRange | None = None) -> BlobReader:
        """An open read of the blob (or of ``byte_range``); raises ``BlobNotFound`` and
        ``BlobRangeNotSatisfiable`` here, before the first byte is read."""

    async def head(self, key: str) -> BlobInfo:
        """Size, modification time and sha256 of the blob."""

    async def list(
        self, prefix: str = "", *, page_size: int = MAX_LIST_PAGE, page_token: str = ""
    ) -> Page[BlobEntry]:
        """The blobs whose keys start with ``prefix``, in key order, from after
        ``page_token`` (a ``next_page_token`` this store returned)."""

    async def delete(self, key: str) -> None:
        """Removes the blob; a key with no blob is no error."""

    async def delete_prefix(self, prefix: str) -> int:
        """Removes every blob under the folder ``prefix`` (ending with ``/``) and
        returns how many. Blobs written under it meanwhile may stay."""


def check_listing(prefix: str, page_size: int, page_token: str) -> str:
    """Checks a ``list`` call's arguments; returns the key its page token goes on after."""
    check_prefix(prefix)
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise InvalidArgument("page_size", f"must be an integer, got {page_size!r}")
    if not 1 <= page_size <= MAX_LIST_PAGE:
        raise InvalidArgument("page_size", f"must be in [1, {MAX_LIST_PAGE}], got {page_size}")
    return decode_page_token(page_token)


async def exists(store: BlobStore, key: str) -> bool:
    """Whether a blob has ``key``: its ``head`` answers."""
    try:
        await store.head(key)
    except BlobNotFound:
        return False
    return True
