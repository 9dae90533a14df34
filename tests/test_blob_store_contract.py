"""The BlobStore contract: every promise of ``shardcron.blobs.store``, for any implementation.

Written once, run unchanged against each entry of ``tests.support.blob_stores.BACKENDS``:
a ``FileBlobStore`` in the test's directory, and an ``S3BlobStore`` on a real S3
service (the session's Versity S3 gateway), under a prefix of the test's own. Each
test takes ``store`` (opened, empty) or ``make_store`` (a new, unopened store on the
same location, to reopen it). Nothing in a test may know which implementation it
talks to.
"""

from __future__ import annotations

import asyncio
import hashlib
import tracemalloc
from collections.abc import AsyncIterator, Callable
from datetime import UTC
from pathlib import Path

import pytest

from shardcron.blobs.errors import (
    BlobDigestMismatch,
    BlobNotFound,
    BlobRangeNotSatisfiable,
    InvalidBlobKey,
)
from shardcron.blobs.store import MAX_LIST_PAGE, BlobStore, ByteRange
from shardcron.client.errors import InvalidArgument
from tests.support.blob_stores import BACKENDS, StoreMaker, Stream

DATA = bytes(range(256)) * 4  # 1,024 bytes, each offset's value known


@pytest.fixture(params=list(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def store(make_store: StoreMaker) -> AsyncIterator[BlobStore]:
    s = make_store()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def all_keys(store: BlobStore, prefix: str = "") -> list[str]:
    page = await store.list(prefix)
    assert page.next_page_token == ""
    return [e.key for e in page.items]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- whole blobs


async def test_a_blob_store_opens_twice_and_starts_empty(store: BlobStore) -> None:
    assert isinstance(store, BlobStore)
    await store.open()  # idempotent
    assert await all_keys(store) == []


async def test_put_get_head_round_trip(store: BlobStore) -> None:
    await store.put("results/alice/r1/report.txt", DATA)
    assert await store.get("results/alice/r1/report.txt") == DATA
    info = await store.head("results/alice/r1/report.txt")
    assert (info.key, info.size, info.sha256) == ("results/alice/r1/report.txt", 1024, sha(DATA))
    assert info.modified_at.tzinfo == UTC


async def test_a_put_replaces_the_blob_whole(store: BlobStore) -> None:
    await store.put("k/a", DATA)
    await store.put("k/a", b"short")
    assert await store.get("k/a") == b"short"
    assert (await store.head("k/a")).sha256 == sha(b"short")


async def test_an_empty_blob_is_a_blob(store: BlobStore) -> None:
    await store.put("k/empty", b"")
    assert await store.get("k/empty") == b""
    info = await store.head("k/empty")
    assert (info.size, info.sha256) == (0, sha(b""))
    assert await store.get("k/empty", ByteRange(0)) == b""
    assert await store.get("k/empty", ByteRange.last(5)) == b""
    with pytest.raises(BlobRangeNotSatisfiable) as refused:
        await store.get("k/empty", ByteRange(1))
    assert refused.value.size == 0
    assert await all_keys(store) == ["k/empty"]


async def test_a_key_under_a_blob_is_refused_or_kept_beside_it(store: BlobStore) -> None:
    await store.put("n/a", b"1")
    try:
        await store.put("n/a/b", b"2")
    except InvalidBlobKey:
        assert await all_keys(store) == ["n/a"]
    else:
        assert await all_keys(store) == ["n/a", "n/a/b"]
    assert await store.get("n/a") == b"1"


async def test_blobs_outlive_their_store_object(make_store: StoreMaker) -> None:
    first = make_store()
    await first.open()
    await first.put("k/kept", DATA)
    await first.close()
    again = make_store()
    await again.open()
    try:
        assert await again.get("k/kept") == DATA
    finally:
        await again.close()


# --------------------------------------------------------------------------- ranges

RANGES = [
    (ByteRange(0), 0, 1024),
    (ByteRange(10), 10, 1024),
    (ByteRange(0, 10), 0, 10),
    (ByteRange(500, 600), 500, 600),
    (ByteRange(1000, 5000), 1000, 1024),  # clamped to the end
    (ByteRange(1023), 1023, 1024),
    (ByteRange(1024), 1024, 1024),  # starts at the end: nothing
    (ByteRange(300, 300), 300, 300),  # empty
    (ByteRange.last(1), 1023, 1024),
    (ByteRange.last(100), 924, 1024),
    (ByteRange.last(5000), 0, 1024),  # clamped to the start
    (ByteRange.last(0), 1024, 1024),
]


@pytest.mark.parametrize(("byte_range", "start", "end"), RANGES, ids=str)
async def test_ranges_read_what_they_name(
    store: BlobStore, byte_range: ByteRange, start: int, end: int
) -> None:
    await store.put("k/ranged", DATA)
    assert await store.get("k/ranged", byte_range) == DATA[start:end]
    async with await store.get_stream("k/ranged", byte_range) as reader:
        assert (reader.start, reader.end, reader.info.size) == (start, end, 1024)
        assert await reader.read() == DATA[start:end]


async def test_a_range_past_the_end_says_the_size(store: BlobStore) -> None:
    await store.put("k/ranged", DATA)
    for byte_range in (ByteRange(1025), ByteRange(2000, 3000), ByteRange(1025, 1025)):
        with pytest.raises(BlobRangeNotSatisfiable) as refused:
            await store.get("k/ranged", byte_range)
        assert (refused.value.size, refused.value.field) == (1024, "range")
        with pytest.raises(BlobRangeNotSatisfiable):
            await store.get_stream("k/ranged", byte_range)


def test_a_malformed_range_is_refused_when_built() -> None:
    for make in (
        lambda: ByteRange(-1),
        lambda: ByteRange(5, 4),
        lambda: ByteRange.last(-2),
        lambda: ByteRange(3, suffix=2),
    ):
        with pytest.raises(InvalidArgument) as refused:
            make()
        assert refused.value.field == "range"


# --------------------------------------------------------------------------- missing and invalid


async def test_a_missing_key_is_blob_not_found(store: BlobStore) -> None:
    await store.put("k/there", DATA)
    for read in (
        lambda: store.get("k/missing"),
        lambda: store.get("k/missing", ByteRange(0, 0)),
        lambda: store.get("k/missing", ByteRange.last(0)),
        lambda: store.get("k/there/below"),
        lambda: store.get_stream("k/missing"),
        lambda: store.head("k/missing"),
        lambda: store.head("k"),  # a folder of blobs is not a blob
    ):
        with pytest.raises(BlobNotFound):
            await read()
    await store.delete("k/missing")  # no error
    assert await store.delete_prefix("nothing/here/") == 0
    assert await store.get("k/there") == DATA


BAD_KEYS = [
    "",
    "/a",
    "a/",
    "a//b",
    "..",
    "../a",
    "a/../b",
    "./a",
    "a/./b",
    ".hidden",
    "a/.staging",
    "-a",
    "a\\b",
    "a b",
    "a\0b",
    "é",
    "a?b",
    "x" * 256,
    "/".join(["x" * 100] * 8),  # 807 characters
]


def all_calls(key: str) -> list[Callable]:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"x"

    return [
        lambda s: s.put(key, b"x"),
        lambda s: s.put_if_absent(key, b"x"),
        lambda s: s.put_stream(key, chunks()),
        lambda s: s.get(key),
        lambda s: s.get_stream(key),
        lambda s: s.head(key),
        lambda s: s.delete(key),
    ]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
async def test_invalid_keys_are_refused_and_change_nothing(store: BlobStore, key: str) -> None:
    await store.put("k/kept", DATA)
    for call in all_calls(key):
        with pytest.raises(InvalidBlobKey) as refused:
            await call(store)
        assert refused.value.field == "key"
    assert await all_keys(store) == ["k/kept"]
    assert await store.get("k/kept") == DATA


async def test_invalid_prefixes_page_tokens_and_sizes_are_refused(store: BlobStore) -> None:
    for prefix in ("/", "/a", "a//", "../", "a b/"):
        with pytest.raises(InvalidBlobKey):
            await store.list(prefix)
    for folder in ("", "a", "a/b", "/", "a//"):  # whole segments ending with '/' only
        with pytest.raises(InvalidBlobKey):
            await store.delete_prefix(folder)
    for token in ("a\nb", "é", "x" * 2000):
        with pytest.raises(InvalidBlobKey) as refused:
            await store.list("", page_token=token)
        assert refused.value.field == "page_token"
    for size in (0, -1, MAX_LIST_PAGE + 1):
        with pytest.raises(InvalidArgument) as refused:
            await store.list("", page_size=size)
        assert refused.value.field == "page_size"
    with pytest.raises(InvalidBlobKey) as refused:
        await store.put_stream("k/a", Stream(1).chunks(), sha256="ABC")
    assert refused.value.field == "sha256"


async def test_keys_are_checked_before_any_io(make_store: StoreMaker) -> None:
    """A store never opened has nothing to do I/O with: a bad key is refused as such,
    and only a good one gets as far as finding the store closed."""
    unopened = make_store()
    for call in all_calls("a/../b"):
        with pytest.raises(InvalidBlobKey):
            await call(unopened)
    for call in all_calls("a/b"):
        with pytest.raises(RuntimeError, match="not open"):
            await call(unopened)


# --------------------------------------------------------------------------- listings

KEYS = [
    "a",
    "a-b",
    "a.b/c",
    "a/b",
    "a/b0",
    "a/b/c",
    "a/b/c/d",
    "a0",
    "a@x",
    "B/x",
    "out/alan/1",
    "out/alice/1",
    "out/alice/2",
    "out/alicex/1",
    "out/bob/1",
    "z",
]


async def put_all(store: BlobStore, keys: list[str]) -> None:
    for i, key in enumerate(reversed(keys)):
        await store.put(key, bytes(i))


async def test_a_listing_is_in_key_order_with_sizes(store: BlobStore) -> None:
    keys = [k for k in KEYS if k not in ("a/b", "a", "a/b/c")]  # no blob is another's folder
    await put_all(store, keys)
    page = await store.list()
    assert [e.key for e in page.items] == sorted(keys, key=lambda k: k.encode())
    assert page.next_page_token == ""
    sizes = {e.key: e.size for e in page.items}
    assert sizes == {key: i for i, key in enumerate(reversed(keys))}
    assert all(e.modified_at.tzinfo == UTC for e in page.items)


async def test_pages_follow_each_other_to_the_end(store: BlobStore) -> None:
    keys = [f"p/{i:03d}" for i in range(7)]
    await put_all(store, keys)
    seen, token, pages = [], "", 0
    while True:
        page = await store.list("p/", page_size=3, page_token=token)
        pages += 1
        seen += [e.key for e in page.items]
        token = page.next_page_token
        if not token:
            break
        assert len(page.items) == 3
    assert (seen, pages) == (keys, 3)


async def test_a_prefix_lists_only_what_starts_with_it(store: BlobStore) -> None:
    await put_all(store, ["out/alan/1", "out/alice/1", "out/alice/2", "out/alicex/1", "out/bob/1"])
    assert await all_keys(store, "out/alice/") == ["out/alice/1", "out/alice/2"]
    assert await all_keys(store, "out/alice") == ["out/alice/1", "out/alice/2", "out/alicex/1"]
    assert await all_keys(store, "out/al") == [
        "out/alan/1",
        "out/alice/1",
        "out/alice/2",
        "out/alicex/1",
    ]
    assert await all_keys(store, "out/alice/1") == ["out/alice/1"]
    assert await all_keys(store, "out/c") == []
    assert await all_keys(store, "nothing/") == []


# --------------------------------------------------------------------------- deletes


async def test_delete_removes_one_blob(store: BlobStore) -> None:
    await put_all(store, ["d/a/1", "d/a/2"])
    await store.delete("d/a/1")
    assert await all_keys(store) == ["d/a/2"]
    with pytest.raises(BlobNotFound):
        await store.head("d/a/1")
    await store.delete("d/a/1")  # twice: no error


async def test_delete_prefix_removes_a_folder_and_nothing_beside_it(store: BlobStore) -> None:
    await put_all(store, ["out/alan/1", "out/alice/1", "out/alice/x/2", "out/alicex/1", "z"])
    assert await store.delete_prefix("out/al/") == 0
    assert await store.delete_prefix("out/alice/") == 2
    assert await all_keys(store) == ["out/alan/1", "out/alicex/1", "z"]
    await store.put("out/alice/3", b"again")  # its folder can be written again
    assert await store.get("out/alice/3") == b"again"


async def test_delete_prefix_deletes_more_than_a_listing_page(store: BlobStore) -> None:
    total = MAX_LIST_PAGE + 7
    limit = asyncio.Semaphore(16)

    async def put(i: int) -> None:
        async with limit:
            await store.put(f"many/{i:05d}", b"")

    await asyncio.gather(*(put(i) for i in range(total)))
    await store.put("kept/1", b"")
    assert await store.delete_prefix("many/") == total
    assert await all_keys(store) == ["kept/1"]


# --------------------------------------------------------------------------- streams


async def test_a_large_stream_goes_in_parts_with_memory_bounded(store: BlobStore) -> None:
    stream = Stream(24 << 20)
    tracemalloc.start()
    try:
        written = await store.put_stream("big/blob", stream.chunks())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (written.size, written.sha256) == (stream.size, stream.sha256())
    assert peak < 16 << 20, f"put_stream held {peak / (1 << 20):.1f} MiB of a 24 MiB stream"
    info = await store.head("big/blob")
    assert (info.size, info.sha256) == (stream.size, None)  # no digest was announced
    digest, size = hashlib.sha256(), 0
    async with await store.get_stream("big/blob") as reader:
        async for chunk in reader:
            assert len(chunk) <= 1 << 20
            digest.update(chunk)
            size += len(chunk)
    assert (size, digest.hexdigest()) == (stream.size, stream.sha256())
    tail = await store.get("big/blob", ByteRange.last(100))
    assert tail == stream.data()[-100:]


@pytest.mark.parametrize("size", [0, 1, 5 << 20, (5 << 20) + 1, 10 << 20])
async def test_streams_of_every_size_round_trip_with_their_digest(
    store: BlobStore, size: int
) -> None:
    stream = Stream(size, chunk=1 << 20)
    written = await store.put_stream("s/blob", stream.chunks(), sha256=stream.sha256())
    assert (written.size, written.sha256) == (size, stream.sha256())
    assert (await store.head("s/blob")).sha256 == stream.sha256()
    assert await store.get("s/blob") == stream.data()


async def test_a_stream_of_the_wrong_digest_stores_nothing(store: BlobStore) -> None:
    await store.put("s/blob", b"old")
    for size in (10, 6 << 20):  # one request, and a multipart upload
        with pytest.raises(BlobDigestMismatch):
            await store.put_stream("s/blob", Stream(size).chunks(), sha256=sha(b"other"))
    assert await store.get("s/blob") == b"old"
    assert await all_keys(store) == ["s/blob"]


async def test_a_stream_that_fails_stores_nothing(store: BlobStore) -> None:
    await store.put("s/blob", b"old")

    async def failing() -> AsyncIterator[bytes]:
        async for chunk in Stream(7 << 20).chunks():
            yield chunk
        raise OSError("the source went away")

    with pytest.raises(OSError, match="went away"):
        await store.put_stream("s/blob", failing())
    with pytest.raises(OSError, match="went away"):
        await store.put_stream("s/new", failing())
    assert await store.get("s/blob") == b"old"
    assert await all_keys(store) == ["s/blob"]


# --------------------------------------------------------------------------- concurrency


async def test_put_if_absent_stores_once(store: BlobStore) -> None:
    digest = sha(DATA)
    key = f"artifacts/alice/{digest}"
    assert await store.put_if_absent(key, DATA) is True
    assert await store.put_if_absent(key, b"something else") is False
    assert await store.get(key) == DATA
    assert (await store.head(key)).sha256 == digest
    assert await store.put_stream(key, Stream(10).chunks(), if_absent=True) is None
    assert await store.get(key) == DATA


async def test_racing_put_if_absent_one_wins_and_all_read_its_bytes(store: BlobStore) -> None:
    for round_ in range(8):
        key = f"race/{round_}"
        contents = [f"writer {i} of {round_}".encode() * 1000 for i in range(4)]
        won = await asyncio.gather(*(store.put_if_absent(key, c) for c in contents))
        assert won.count(True) == 1, won
        stored = contents[won.index(True)]
        assert await asyncio.gather(*(store.get(key) for _ in contents)) == [stored] * 4


async def test_racing_streamed_put_if_absent_one_wins(store: BlobStore) -> None:
    streams = [Stream(6 << 20, seed=seed) for seed in (1, 2, 3)]
    results = await asyncio.gather(
        *(store.put_stream("race/big", s.chunks(), if_absent=True) for s in streams)
    )
    winners = [s for s, r in zip(streams, results, strict=True) if r is not None]
    assert len(winners) == 1, results
    assert (await store.head("race/big")).size == winners[0].size
    assert await store.get("race/big", ByteRange.last(1000)) == winners[0].data()[-1000:]


async def test_concurrent_writers_of_one_key_never_tear_it(store: BlobStore) -> None:
    contents = [bytes([i]) * (300_000 + i) for i in range(6)]
    await store.put("torn/k", contents[0])
    reads: list[bytes] = []

    async def reader() -> None:
        for _ in range(10):
            reads.append(await store.get("torn/k"))

    await asyncio.gather(*(store.put("torn/k", c) for c in contents), reader(), reader())
    final = await store.get("torn/k")
    assert final in contents
    assert all(r in contents for r in reads)
    assert (await store.head("torn/k")).sha256 == sha(final)
