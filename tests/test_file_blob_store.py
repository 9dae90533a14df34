"""What the contract suite cannot see of ``FileBlobStore``: its files, the links planted in
its tree, its staging folder, and deletes racing writes on the same folders."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shardcron.blobs.errors import BlobNotFound, BlobStoreUnavailable, InvalidBlobKey
from shardcron.blobs.files import HEADER, STAGING, STALE_STAGED_SECONDS, FileBlobStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FileBlobStore]:
    s = FileBlobStore(tmp_path / "root")
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_a_blob_is_a_file_at_its_key_behind_a_header(store: FileBlobStore) -> None:
    await store.put("results/alice/r1/out.txt", b"hello")
    path = store.root / "results/alice/r1/out.txt"
    assert path.read_bytes()[HEADER.size :] == b"hello"
    assert sorted(os.listdir(store.root)) == [STAGING, "results"]
    assert os.listdir(store.root / STAGING) == []  # nothing staged is left behind


async def test_links_planted_in_the_tree_are_never_followed(
    store: FileBlobStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not a blob")
    await store.put("elsewhere/blob", b"real")
    os.symlink(outside, store.root / "planted")
    os.symlink(store.root / "elsewhere/blob", store.root / "alias")
    for key in ("planted/secret", "alias"):
        with pytest.raises(BlobNotFound):
            await store.get(key)
    with pytest.raises((BlobStoreUnavailable, InvalidBlobKey)):
        await store.put("planted/new", b"escape")
    assert sorted(os.listdir(outside)) == ["secret"]
    assert [e.key for e in (await store.list()).items] == ["elsewhere/blob"]
    assert await store.delete_prefix("planted/") == 0
    assert (outside / "secret").read_bytes() == b"not a blob"


async def test_a_file_that_is_not_a_blob_is_said_to_be_so(store: FileBlobStore) -> None:
    (store.root / "k").mkdir()
    (store.root / "k/foreign").write_bytes(b"x" * 100)
    with pytest.raises(BlobStoreUnavailable, match="not a blob file"):
        await store.get("k/foreign")


async def test_a_key_under_a_blob_is_refused(store: FileBlobStore) -> None:
    await store.put("a/b", b"blob")
    with pytest.raises(InvalidBlobKey, match="share a name"):
        await store.put("a/b/c", b"under it")
    assert await store.get("a/b") == b"blob"


async def test_staged_files_are_invisible_and_old_ones_swept(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = FileBlobStore(root)
    await store.open()
    (root / STAGING / "crashed.part").write_bytes(b"half a blob")
    (root / STAGING / "fresh.part").write_bytes(b"being written")
    long_ago = time.time() - STALE_STAGED_SECONDS - 60
    os.utime(root / STAGING / "crashed.part", (long_ago, long_ago))
    assert (await store.list()).items == []
    await store.close()
    await store.open()
    assert os.listdir(root / STAGING) == ["fresh.part"]
    await store.close()


async def test_deletes_remove_the_folders_they_empty(store: FileBlobStore) -> None:
    await store.put("output/alice/r/1/stdout/0", b"x")
    await store.put("output/alice/r/1/stdout/1", b"x")
    await store.put("output/bob/r/1/stdout/0", b"x")
    await store.delete("output/alice/r/1/stdout/0")
    assert (store.root / "output/alice/r/1/stdout").is_dir()
    await store.delete("output/alice/r/1/stdout/1")
    assert sorted(os.listdir(store.root / "output")) == ["bob"]
    assert await store.delete_prefix("output/bob/") == 1
    assert sorted(os.listdir(store.root)) == [STAGING]


async def test_writes_racing_deletes_of_their_folder_never_fail(store: FileBlobStore) -> None:
    """A write whose folder a delete removes as it is made makes it again: every put
    returns, and one that returned after the last delete is there."""
    for round_ in range(30):
        key = f"race/{round_ % 3}/k{round_}"
        await asyncio.gather(
            store.put(key, b"x"),
            store.delete_prefix(f"race/{round_ % 3}/"),
            store.delete(f"race/{round_ % 3}/other"),
        )
        await store.put(key, b"y")
        assert await store.get(key) == b"y"


async def test_an_unusable_root_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(BlobStoreUnavailable):
        await FileBlobStore(tmp_path / "file" / "root").open()


def test_the_root_is_an_absolute_path() -> None:
    with pytest.raises(ValueError, match="^root: "):
        FileBlobStore("relative/root")
