"""The node's writer of result files (``coordinator/result_blobs.py``) on both blob
stores, a directory and the real S3-compatible service: files stored whole under the
run's owner, their digests checked, pieces out of order or short, the bounds, and a
node without a blob store; each file left out said in the run's note."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shardcron.blobs.errors import BlobNotFound
from shardcron.blobs.layout import result_key
from shardcron.blobs.store import BlobStore
from shardcron.client.errors import InvalidArgument, NotFound
from shardcron.client.stream import ResultFilePiece
from shardcron.client.types import Run, RunResultFile, RunState
from shardcron.coordinator.result_blobs import (
    NO_BLOB_STORE,
    ResultBlobConfig,
    ResultBlobs,
    delete_results,
    read_result,
)
from tests.support.blob_stores import BACKENDS

OWNER, RUN, TOKEN = "alice", "run-1", 5
WRITER = ("w-1", "instance-a")  # the worker process that sends the pieces


@pytest.fixture(params=list(BACKENDS))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    made = BACKENDS[request.param](request, tmp_path)()
    await made.open()
    yield made
    await made.close()


def pieces(name: str, data: bytes, step: int = 7, **over: object) -> list[ResultFilePiece]:
    sha = hashlib.sha256(data).hexdigest()
    out = []
    for at in range(0, max(len(data), 1), step):
        chunk = data[at : at + step]
        fields = dict(
            run_id=RUN, fencing_token=TOKEN, name=name, offset=at, data=chunk,
            size=len(data), sha256=sha, last=at + step >= len(data),
        )  # fmt: skip
        fields.update(over)
        out.append(ResultFilePiece(**fields))  # type: ignore[arg-type]
    return out


async def send(blobs: ResultBlobs, *groups: list[ResultFilePiece]) -> None:
    for group in groups:
        for piece in group:
            await blobs.take(OWNER, piece, WRITER)


def run_with(files: tuple[RunResultFile, ...]) -> Run:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return Run(
        id=RUN, job_id="j", owner=OWNER, fire_key="k", fire_at=now, due_at=now,
        state=RunState.SUCCEEDED, results=files,
    )  # fmt: skip


async def test_files_are_stored_whole_and_listed(store: BlobStore) -> None:
    blobs = ResultBlobs(store)
    report, empty = b'{"rows": 3}' * 100, b""
    await send(blobs, pieces("report.json", report), pieces("empty", empty))
    kept, note = await blobs.finish(RUN, TOKEN, "")
    assert kept == (
        RunResultFile(name="empty", size=0, sha256=hashlib.sha256(b"").hexdigest()),
        RunResultFile(name="report.json", size=len(report), sha256=hashlib.sha256(report).hexdigest()),
    )  # fmt: skip
    assert note == ""
    assert await store.get(result_key(OWNER, RUN, "report.json")) == report
    run = run_with(kept)
    got = b"".join([d async for _, d in read_result(store, run, "report.json", 3, 10)])
    assert got == report[3:13]
    with pytest.raises(NotFound):
        [d async for _, d in read_result(store, run, "other", 0, None)]
    with pytest.raises(InvalidArgument) as e:
        [d async for _, d in read_result(store, run, "report.json", len(report) + 1, None)]
    assert e.value.field == "offset"
    assert await delete_results(store, OWNER, RUN) == 2
    with pytest.raises(BlobNotFound):
        await store.get(result_key(OWNER, RUN, "report.json"))


async def test_a_digest_that_does_not_match_stores_nothing(store: BlobStore) -> None:
    blobs = ResultBlobs(store)
    await send(blobs, pieces("lie.txt", b"hello", sha256="0" * 64))
    kept, note = await blobs.finish(RUN, TOKEN, "from the worker")
    assert kept == ()
    assert note.startswith("from the worker; lie.txt: not kept:")
    with pytest.raises(BlobNotFound):
        await store.get(result_key(OWNER, RUN, "lie.txt"))


async def test_pieces_out_of_order_or_missing_store_nothing(store: BlobStore) -> None:
    blobs = ResultBlobs(store)
    skipped = pieces("gap.bin", b"abcdefghijklmnop", step=4)
    del skipped[1]
    unfinished = pieces("short.bin", b"abcdefghijklmnop", step=4)[:-1]
    late = pieces("late.bin", b"abcdefghijklmnop", step=4)[1:]
    await send(blobs, skipped, unfinished, late)
    kept, note = await blobs.finish(RUN, TOKEN, "")
    assert kept == ()
    assert "gap.bin: not kept: its pieces came out of order" in note
    assert "short.bin: not kept: its last piece did not come" in note
    assert "late.bin: not kept: its first pieces did not come to this node" in note
    listing = await store.list(f"results/{OWNER}/")
    assert listing.items == []


async def test_the_node_keeps_its_bounds_whatever_the_worker_sends(tmp_path: Path) -> None:
    from shardcron.blobs.files import FileBlobStore

    store = FileBlobStore(tmp_path / "blobs")
    await store.open()
    blobs = ResultBlobs(store, ResultBlobConfig(max_files=2, max_file_bytes=10, max_bytes=15))
    await send(
        blobs, pieces("a", b"x" * 8), pieces("big", b"y" * 11), pieces("b", b"z" * 8),
        pieces("c", b"w" * 2), pieces("d", b"v"),
    )  # fmt: skip
    kept, note = await blobs.finish(RUN, TOKEN, "")
    assert [f.name for f in kept] == ["a", "c"]
    assert "big: not kept: 11 bytes, past the 10 a file may hold" in note
    assert "b: not kept: past the 15 bytes a run's files may hold together" in note
    assert "d: not kept: past the 2 files a run keeps" in note
    await store.close()


async def test_without_a_blob_store_none_are_kept_and_that_is_said() -> None:
    blobs = ResultBlobs(None)
    await send(blobs, pieces("a.txt", b"hello"))
    assert await blobs.finish(RUN, TOKEN, "") == ((), NO_BLOB_STORE)
    assert await blobs.finish("other-run", TOKEN, "") == ((), "")  # sent none: nothing said


async def test_a_result_vouched_for_by_no_lease_ends_only_its_own_processs_files(
    tmp_path: Path,
) -> None:
    """A result re-sent in a Hello (no stream's lease vouches for it) ends the files of
    its run only when the worker process that sent them re-sends it."""
    from shardcron.blobs.files import FileBlobStore

    store = FileBlobStore(tmp_path / "blobs")
    await store.open()
    blobs = ResultBlobs(store)
    await send(blobs, pieces("a.txt", b"hello"))
    assert await blobs.finish(RUN, TOKEN, "", writer=("w-1", "instance-b")) == ((), "")
    kept, note = await blobs.finish(RUN, TOKEN, "", writer=WRITER)
    assert [f.name for f in kept] == ["a.txt"] and note == ""
    await store.close()


async def test_a_failing_store_keeps_nothing_says_so_and_the_next_file_is_tried(
    tmp_path: Path,
) -> None:
    import shutil

    from shardcron.blobs.files import FileBlobStore

    root = tmp_path / "blobs"
    store = FileBlobStore(root)
    await store.open()
    blobs = ResultBlobs(store)
    shutil.rmtree(root)
    root.write_text("not a directory")  # every write fails now
    await send(blobs, pieces("a.txt", b"hello" * 10))
    root.unlink()
    await store.close()
    store = FileBlobStore(root)
    await store.open()
    blobs.store = store  # the store is back
    await send(blobs, pieces("b.txt", b"world"))
    kept, note = await blobs.finish(RUN, TOKEN, "")
    assert [f.name for f in kept] == ["b.txt"]
    assert note == "a.txt: not kept: blob store unavailable"
    await store.close()
