"""Artifacts without processes: the archive checks a node makes before it stores one
(``blobs/archives.py``), the upload's bounds (``coordinator/artifacts.py``, on a file
blob store), the sweep of artifacts no job refers to (on a real SQLite store: the
contract suite runs the references over Cassandra too), and a worker's cache (``worker/artifacts.py``): a copy changed on disk is
fetched again, bytes of another digest are refused, the least recently used copies go
first and one in use never."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import tarfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shardcron.blobs.archives import ArchiveLimits, check_archive
from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.layout import artifact_key
from shardcron.blobs.store import exists
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import CommandTask, Job, JobSpec, JobState
from shardcron.coordinator.artifact_retention import ArtifactSweeper
from shardcron.coordinator.artifacts import Artifacts, record_refs
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from shardcron.worker.artifacts import ArtifactCache, ArtifactFetchFailed
from tests.support.store_builders import ALICE, make_job


def tar_of(entries: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for item in entries:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
            else:
                info = tarfile.TarInfo(item[0])
                info.size = len(item[1])
                tar.addfile(info, io.BytesIO(item[1]))
    return buf.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def refusal(archive: bytes, limits: ArchiveLimits | None = None) -> str:
    with pytest.raises(InvalidArgument) as refused:
        check_archive(io.BytesIO(archive), limits or ArchiveLimits())
    assert refused.value.field == "artifact"
    return refused.value.reason


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (entry("/abs"), "'/abs': an absolute path"),
        (entry("a/../../up"), "'a/../../up': a path with '..'"),
        (entry("a/../inside"), "'a/../inside': a path with '..'"),
        (entry("s", tarfile.SYMTYPE, "/etc/passwd"), "'s': a link to an absolute path"),
        (entry("s", tarfile.SYMTYPE, "../../x"), "'s': a link that leads out"),
        (entry("d/s", tarfile.SYMTYPE, "../../x"), "'d/s': a link that leads out"),
        (entry("h", tarfile.LNKTYPE, "/etc/passwd"), "'h': an absolute path"),
        (entry("h", tarfile.LNKTYPE, "../x"), "'h': a link that leads out"),
        (entry("c", tarfile.CHRTYPE), "'c': a device, pipe"),
        (entry("b", tarfile.BLKTYPE), "'b': a device, pipe"),
        (entry("f", tarfile.FIFOTYPE), "'f': a device, pipe"),
    ],
)
def test_each_kind_of_unsafe_entry_is_refused_by_name(bad: tarfile.TarInfo, says: str) -> None:
    assert says in refusal(tar_of([("ok", b"x"), bad]))


def test_links_and_paths_that_stay_inside_pass() -> None:
    archive = tar_of(
        [
            ("bin/tool", b"#!/bin/sh\n"),
            entry("lib", tarfile.DIRTYPE),
            entry("bin/alias", tarfile.SYMTYPE, "tool"),
            entry("lib/up", tarfile.SYMTYPE, "../bin/tool"),
            entry("hard", tarfile.LNKTYPE, "bin/tool"),
        ],
        mode="w",
    )
    info = check_archive(io.BytesIO(archive), ArchiveLimits())
    assert (info.entries, info.unpacked_bytes) == (5, len(b"#!/bin/sh\n"))


def test_too_many_entries_or_bytes_are_refused_naming_the_entry_past_the_bound() -> None:
    many = tar_of([(f"f{i}", b"") for i in range(4)])
    assert "'f3': more than 3 entries" in refusal(many, ArchiveLimits(entries=3))
    big = tar_of([("a", b"x" * 600), ("b", b"x" * 600)])
    assert "'b': unpacked, the archive passes 1000 bytes" in refusal(
        big, ArchiveLimits(unpacked_bytes=1000)
    )


def test_what_is_not_a_tar_archive_is_refused() -> None:
    assert "not a readable tar archive" in refusal(b"PK\x03\x04 not a tar at all" * 40)
    truncated = tar_of([("a", os.urandom(4096))])[:-100]
    assert "not a readable tar archive" in refusal(truncated)
    assert "no entry" in refusal(tar_of([]))


async def _chunks(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def test_an_upload_is_stored_once_checked_within_its_size(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    await store.open()
    artifacts = Artifacts(store, ArchiveLimits(compressed_bytes=1 << 20))
    archive = tar_of([("run.sh", b"echo hi\n")])
    digest = hashlib.sha256(archive).hexdigest()
    first = await artifacts.upload("ann", len(archive), digest, _chunks(archive[:10], archive[10:]))
    again = await artifacts.upload("ann", len(archive), "", _chunks(archive))
    assert (first.sha256, first.stored, again.stored) == (digest, True, False)
    assert await store.get(artifact_key("ann", digest)) == archive
    await artifacts.require("ann", digest, "f")
    with pytest.raises(InvalidArgument) as other:
        await artifacts.require("bob", digest, "spec.task.command.artifact")
    assert other.value.field == "spec.task.command.artifact"

    refused = [
        (len(archive) + 1, "", (archive,), "size"),  # fewer bytes than announced
        (len(archive) - 1, "", (archive,), "data"),  # more
        (len(archive), "0" * 64, (archive,), "sha256"),  # not the digest announced
        (2 << 20, "", (archive,), "size"),  # past the node's bound
        (len(archive), "", (archive[:5], archive[5:]), None),  # fine: stored already
    ]
    for size, sha, pieces, field in refused:
        if field is None:
            await artifacts.upload("bob", size, sha, _chunks(*pieces))
            continue
        with pytest.raises(InvalidArgument) as bad:
            await artifacts.upload("carl", size, sha, _chunks(*pieces))
        assert bad.value.field == field
    unsafe = tar_of([entry("/etc/x")])
    with pytest.raises(InvalidArgument, match="'/etc/x'"):
        await artifacts.upload("carl", len(unsafe), "", _chunks(unsafe))
    assert not await exists(store, artifact_key("carl", hashlib.sha256(unsafe).hexdigest()))
    assert not await exists(store, artifact_key("carl", digest))
    await store.close()


def _download(data: bytes, calls: list[int]):  # type: ignore[no-untyped-def]
    async def download() -> AsyncIterator[bytes]:
        calls.append(1)
        yield data[:3]
        yield data[3:]

    return download


def _archive(content: bytes) -> bytes:
    """A plain tar of one file holding ``content``: 10,240 bytes for a small one."""
    return tar_of([("f", content)], mode="w")


async def test_a_cached_copy_changed_on_disk_is_fetched_again(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", 1 << 20)
    data = _archive(b"the archive's bytes")
    digest = hashlib.sha256(data).hexdigest()
    calls: list[int] = []
    async with cache.held(digest, _download(data, calls)) as path:
        assert path.read_bytes() == data
    async with cache.held(digest, _download(data, calls)) as path:
        assert path.read_bytes() == data
    assert len(calls) == 1  # the second came from the cache
    (tmp_path / "cache" / digest).write_bytes(b"changed by hand")
    async with cache.held(digest, _download(data, calls)) as path:
        assert path.read_bytes() == data
    assert len(calls) == 2
    assert (cache.stats["hits"], cache.stats["tampered"], cache.stats["downloads"]) == (1, 1, 2)


async def test_bytes_of_another_digest_are_refused_and_not_kept(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", 1 << 20)
    digest = hashlib.sha256(_archive(b"genuine")).hexdigest()
    with pytest.raises(ArtifactFetchFailed, match="digest"):
        async with cache.held(digest, _download(_archive(b"forged!"), [])):
            pass
    assert os.listdir(tmp_path / "cache") == []


async def test_an_archive_the_node_should_have_refused_is_refused_and_not_kept(
    tmp_path: Path,
) -> None:
    # Bytes of the right digest, but no archive a node would store (an old node, a bug):
    # the worker checks the download itself, before its runs' supervisors unpack it
    # with Python's filter alone (which would unpack ``a/../b``: it resolves inside).
    data = tar_of([entry("a", tarfile.DIRTYPE), entry("a/../b")])
    cache = ArtifactCache(tmp_path / "cache", 1 << 20)
    with pytest.raises(ArtifactFetchFailed, match=r"refused: entry 'a/\.\./b'"):
        async with cache.held(hashlib.sha256(data).hexdigest(), _download(data, [])):
            pass
    assert os.listdir(tmp_path / "cache") == []


async def test_the_least_recently_used_copies_go_first_never_one_in_use(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", 25_000)  # room for two of 10,240 bytes
    blobs = [_archive(bytes([i]) * 100) for i in range(4)]
    digests = [hashlib.sha256(b).hexdigest() for b in blobs]
    async with cache.held(digests[0], _download(blobs[0], [])):
        for i in (1, 2):
            async with cache.held(digests[i], _download(blobs[i], [])):
                pass
            os.utime(tmp_path / "cache" / digests[i], (i, i))  # 1 older than 2
        # 0 in use (and oldest): 1, then 2, the least recently used, go to make room for 3
        os.utime(tmp_path / "cache" / digests[0], (0, 0))
        async with cache.held(digests[3], _download(blobs[3], [])):
            pass
    kept = sorted(os.listdir(tmp_path / "cache"))
    assert kept == sorted([digests[0], digests[3]])


async def test_the_sweep_deletes_only_artifacts_no_job_names_past_the_grace(
    sqlite_store: SqliteStore, tmp_path: Path
) -> None:
    """On a real store: the references are what the api records; the sweep reads them
    and the jobs they name, never every job."""
    blobs = FileBlobStore(tmp_path / "blobs")
    await blobs.open()
    digests = {}
    for name in ("kept", "renamed", "deleted", "unnamed", "fresh", "bobs"):
        owner = "bob" if name == "bobs" else ALICE
        data = tar_of([(name, name.encode())])
        digests[name] = hashlib.sha256(data).hexdigest()
        await blobs.put(artifact_key(owner, digests[name]), data)

    def job(name: str, state: JobState = JobState.ACTIVE, owner: str = ALICE) -> Job:
        task = CommandTask(argv=("./run",), artifact=digests[name])
        return make_job(owner, state=state, spec=JobSpec(name=name, task=task))

    keeping = [job("kept"), job("kept"), job("renamed"), job("deleted", JobState.DELETED)]
    keeping.append(job("bobs", owner="bob"))
    for j in keeping:
        await record_refs(sqlite_store, j.owner, [j])
        await sqlite_store.create_jobs([NewJob(job=j)])
    # the job of "renamed" now names "kept": its old reference stays until a sweep
    moved = keeping[2]
    spec = moved.spec.replace(task=CommandTask(argv=("./run",), artifact=digests["kept"]))
    await record_refs(sqlite_store, ALICE, [dataclasses.replace(moved, spec=spec)])
    await sqlite_store.update_job(dataclasses.replace(moved, spec=spec), expected_version=1)
    # a job that was never written (its create failed after the reference)
    ghost = job("unnamed")
    await record_refs(sqlite_store, ALICE, [ghost])

    old = (datetime.now(UTC) - timedelta(hours=3)).timestamp()
    for name, digest in digests.items():  # uploaded 3 hours ago, but "fresh"
        if name != "fresh":
            owner = "bob" if name == "bobs" else ALICE
            os.utime(tmp_path / "blobs" / artifact_key(owner, digest), (old, old))
    now = [datetime.now(UTC)]
    sweeper = ArtifactSweeper(sqlite_store, blobs, grace=timedelta(hours=1), clock=lambda: now[0])
    assert await sweeper.sweep() == 3  # renamed, deleted, unnamed; not fresh
    left = {e.key for e in (await blobs.list("artifacts/")).items}
    assert left == {
        artifact_key(ALICE, digests["kept"]),
        artifact_key(ALICE, digests["fresh"]),
        artifact_key("bob", digests["bobs"]),
    }
    # the stale references went with them; the live ones stay
    assert await sqlite_store.artifact_refs(ALICE, digests["renamed"]) == []
    assert await sqlite_store.artifact_refs(ALICE, digests["unnamed"]) == []
    assert len(await sqlite_store.artifact_refs(ALICE, digests["kept"])) == 3
    now[0] = datetime.now(UTC) + timedelta(hours=2)
    assert await sweeper.sweep() == 1  # fresh, past its grace now
    await blobs.close()
