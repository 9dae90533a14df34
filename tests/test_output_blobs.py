"""The node's writer and reader of runs' output parts (``coordinator/output_blobs``), on
a real directory store and on the session's S3-compatible service: attempts kept apart
by fencing token, parts continued after a restart, cuts (limit, failing store) said."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import VersityGateway
from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.layout import output_prefix
from shardcron.blobs.s3 import S3BlobStore
from shardcron.blobs.store import BlobStore
from shardcron.client.stream import OutputPiece
from shardcron.client.types import RunState
from shardcron.coordinator.output_blobs import OutputBlobConfig, OutputBlobs, list_parts
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.blob_stores import BACKENDS, BUCKET, gateway_options
from tests.support.store_builders import make_job, make_run
from tests.support.waiting import until

OWNER = "acme"
JOB = make_job(OWNER)
SMALL_PARTS = OutputBlobConfig(part_bytes=1000, buffer_bytes=4000)


def piece(token: int, data: bytes, stream: str = "stdout") -> OutputPiece:
    return OutputPiece(run_id=RUN_ID, fencing_token=token, data=data, stream=stream)


RUN_ID = make_run(JOB).id


def run_of(token: int, state: RunState = RunState.SUCCEEDED):  # type: ignore[no-untyped-def]
    return make_run(JOB, state=state, lease_token=token)


async def whole(blobs: OutputBlobs, store: SqliteStore, token: int) -> bytes:
    out, offset = bytearray(), 0
    while chunks := await blobs.read(store, run_of(token), offset, None):
        for chunk in chunks:
            assert chunk.offset == offset
            out += chunk.data
            offset += len(chunk.data)
    return bytes(out)


@pytest.fixture
async def blobs(tmp_path: Path) -> OutputBlobs:
    b = OutputBlobs(FileBlobStore(tmp_path / "blobs"), SMALL_PARTS)
    await b.start()
    yield b  # type: ignore[misc]
    await b.stop()


async def test_a_stale_attempt_never_overwrites_the_newer_ones_output(
    blobs: OutputBlobs, sqlite_store: SqliteStore
) -> None:
    newer = b"attempt two\n" * 200
    for i in range(0, len(newer), 300):
        assert await blobs.take(OWNER, piece(2, newer[i : i + 300])) == b""
    await blobs.finish(RUN_ID, 2)
    # the earlier lease's worker, still running, writes more and longer output
    stale = b"attempt one, still going\n" * 400
    await blobs.take(OWNER, piece(1, stale))
    await blobs.finish(RUN_ID, 1)
    assert await whole(blobs, sqlite_store, 2) == newer
    assert await whole(blobs, sqlite_store, 1) == stale


async def test_streams_interleave_in_part_order_and_ranges_cross_parts(
    blobs: OutputBlobs, sqlite_store: SqliteStore
) -> None:
    written = [("stdout", b"a" * 1500), ("stderr", b"E" * 10), ("stdout", b"b" * 700)]
    for stream, data in written:
        await blobs.take(OWNER, piece(3, data, stream))
    await blobs.finish(RUN_ID, 3)
    assert await whole(blobs, sqlite_store, 3) == b"a" * 1500 + b"E" * 10 + b"b" * 700
    chunks = await blobs.read(sqlite_store, run_of(3), 1495, 20)
    assert [(c.offset, c.stream, c.data) for c in chunks] == [
        (1495, "stdout", b"aaaaa"),
        (1500, "stderr", b"E" * 10),
        (1510, "stdout", b"bbbbb"),
    ]
    last = await blobs.read(sqlite_store, run_of(3), -3, None)
    assert b"".join(c.data for c in last) == b"bbb"


async def test_parts_go_on_after_a_restart_of_the_node(
    tmp_path: Path, sqlite_store: SqliteStore
) -> None:
    first = OutputBlobs(FileBlobStore(tmp_path / "b"), SMALL_PARTS)
    await first.start()
    await first.take(OWNER, piece(4, b"x" * 2500))
    await first.stop()  # what it buffered is written
    second = OutputBlobs(FileBlobStore(tmp_path / "b"), SMALL_PARTS)
    await second.start()
    await second.take(OWNER, piece(4, b"y" * 10))
    assert (await second.finish(RUN_ID, 4)).sha256 == ""  # it did not see the attempt whole
    assert await whole(second, sqlite_store, 4) == b"x" * 2500 + b"y" * 10
    await second.stop()


async def test_the_limit_cuts_the_output_and_says_so_then_and_at_the_end(
    tmp_path: Path, sqlite_store: SqliteStore
) -> None:
    limited = OutputBlobs(
        FileBlobStore(tmp_path / "b"), OutputBlobConfig(part_bytes=1000, limit_bytes=1200)
    )
    await limited.start()
    assert await limited.take(OWNER, piece(5, b"k" * 1000)) == b""
    said = await limited.take(OWNER, piece(5, b"k" * 1000))
    assert b"output truncated: the limit of 1200 bytes" in said
    assert await limited.take(OWNER, piece(5, b"k" * 1000)) == b""
    done = await limited.finish(RUN_ID, 5)
    assert b"the limit of 1200 bytes" in done.notice  # said at the end too
    assert done.truncated == "the limit of 1200 bytes kept per run was reached"
    assert done.sha256 == hashlib.sha256(b"k" * 1200).hexdigest()
    assert await whole(limited, sqlite_store, 5) == b"k" * 1200
    await limited.stop()


async def test_a_jobs_own_limit_is_kept_over_the_nodes(
    blobs: OutputBlobs, sqlite_store: SqliteStore
) -> None:
    said = await blobs.take(OWNER, piece(9, b"j" * 50), limit=20)
    assert b"output truncated: the limit of 20 bytes" in said
    await blobs.finish(RUN_ID, 9)
    assert await whole(blobs, sqlite_store, 9) == b"j" * 20


async def test_a_failing_blob_store_cuts_the_output_says_so_and_never_raises(
    tmp_path: Path, sqlite_store: SqliteStore
) -> None:
    root = tmp_path / "b"
    failing = OutputBlobs(FileBlobStore(root), SMALL_PARTS)
    await failing.start()
    await failing.take(OWNER, piece(6, b"kept" * 250))  # one whole part, written
    # the store's directory is gone and a file is in its place: every write fails
    shutil.rmtree(root)
    root.write_bytes(b"")
    said = await failing.take(OWNER, piece(6, b"lost" * 250))
    assert b"output truncated: blob store unavailable" in said
    assert await failing.take(OWNER, piece(6, b"more")) == b""
    done = await failing.finish(RUN_ID, 6)
    assert b"blob store unavailable" in done.notice
    assert done.truncated.startswith("blob store unavailable for ")
    assert done.sha256 == hashlib.sha256(b"kept" * 250).hexdigest()  # what its parts hold
    # another attempt meanwhile is cut at its first part, without waiting on the store
    said = await failing.take(OWNER, piece(8, b"next" * 250))
    assert b"output truncated: blob store unavailable" in said
    assert failing.buffered == 0
    os.remove(root)
    await failing.stop()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_output_round_trips_on_each_store(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, sqlite_store: SqliteStore
) -> None:
    store: BlobStore = BACKENDS[backend](request, tmp_path)()
    blobs = OutputBlobs(store)  # the node's defaults: 4 MiB parts
    await blobs.start()
    data = os.urandom(9 << 20)
    for i in range(0, len(data), 1 << 16):
        await blobs.take(OWNER, piece(7, data[i : i + (1 << 16)]))
    await blobs.finish(RUN_ID, 7)
    parts = await list_parts(store, OWNER, RUN_ID, 7)
    assert [p.end - p.start for p in parts] == [4 << 20, 4 << 20, 1 << 20]
    assert await whole(blobs, sqlite_store, 7) == data
    assert all(p.key.startswith(output_prefix(OWNER, RUN_ID, 7)) for p in parts)
    await blobs.stop()


@pytest.fixture
def own_gateway(tmp_path: Path) -> Iterator[VersityGateway]:
    """An S3 gateway of this test alone: it is stopped (SIGSTOP) and continued."""
    gateway = VersityGateway(tmp_path / "gw").start(buckets=[BUCKET])
    try:
        yield gateway
    finally:
        pid = gateway.pid()
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        gateway.stop(grace=0)


async def test_a_store_down_pauses_the_workers_output_keeps_it_and_resumes(
    own_gateway: VersityGateway, sqlite_store: SqliteStore
) -> None:
    """With a worker that keeps output (``room``), a store that does not answer pauses
    the attempt instead of cutting it: what the node buffers is kept (bounded), written
    once the store answers again, and the worker resumed; the digest covers it all."""
    store = S3BlobStore(BUCKET, f"t-{uuid.uuid4().hex[:12]}", gateway_options(own_gateway))
    config = OutputBlobConfig(
        part_bytes=1000, buffer_bytes=4000, held_bytes=8000, write_timeout=1.0, flush_interval=0.2
    )
    blobs = OutputBlobs(store, config)
    await blobs.start()
    said: list[bool] = []
    pid = own_gateway.pid()
    assert pid is not None
    try:
        kept = b"".join(b"%06d\n" % i for i in range(300))  # 2,100 bytes: two parts
        assert await blobs.take(OWNER, piece(11, kept), room=said.append) == b""
        await until(lambda: blobs.buffered == blobs.writing == 0, 10, "written beside")
        os.kill(pid, signal.SIGSTOP)  # it takes connections and never answers
        more = b"m" * 1500
        assert await blobs.take(OWNER, piece(11, more), room=said.append) == b""
        assert blobs.writing == 1 and said == []  # the write goes on beside; take never waited
        await until(lambda: said == [False], 10, "the worker paused")
        in_flight = b"f" * 3000  # what the worker sent before the pause reached it
        assert await blobs.take(OWNER, piece(11, in_flight), room=said.append) == b""
        assert blobs.paused == 1 and blobs.buffered == 4500  # kept, not cut
        # another run's output while the store is down: paused at once, never tried
        other = OutputPiece(run_id="other", fencing_token=3, data=b"o" * 1200)
        assert await blobs.take(OWNER, other, room=lambda resumed: None) == b""
        assert blobs.paused == 2
        os.kill(pid, signal.SIGCONT)
        await until(lambda: said == [False, True], 30, "the worker resumed")
        await until(lambda: blobs.buffered == 0 and blobs.paused == 0, 30, "both written")
        done = await blobs.finish(RUN_ID, 11)
        assert (done.notice, done.truncated) == (b"", "")
        whole_output = kept + more + in_flight
        assert done.sha256 == hashlib.sha256(whole_output).hexdigest()
        assert await whole(blobs, sqlite_store, 11) == whole_output
        # past the bound of what paused attempts hold: cut, and said for how long
        os.kill(pid, signal.SIGSTOP)
        assert await blobs.take(OWNER, piece(12, b"c" * 1500), room=said.append) == b""
        await until(lambda: said[-1] is False, 10, "the next attempt paused")
        cut = await blobs.take(OWNER, piece(12, b"c" * 9000), room=said.append)
        assert b"output truncated: blob store unavailable for " in cut
        os.kill(pid, signal.SIGCONT)
        done = await blobs.finish(RUN_ID, 12)
        assert done.truncated.startswith("blob store unavailable for ")
    finally:
        os.kill(pid, signal.SIGCONT)
        await blobs.stop()
