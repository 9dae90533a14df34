"""Blob keys: the alphabet the seam checks (``shardcron.blobs.keys``) and the layout callers
build keys with (``shardcron.blobs.layout``): one owner's keys never name another's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.blobs.errors import InvalidBlobKey
from shardcron.blobs.keys import (
    MAX_KEY,
    check_folder,
    check_key,
    check_prefix,
    check_store_prefix,
)
from shardcron.blobs.layout import (
    BlobKind,
    artifact_key,
    output_part_key,
    output_prefix,
    output_stream_prefix,
    owner_of,
    owner_prefix,
    result_key,
    results_prefix,
)

RUN = "0192f0c4-8a6e-8b21-9c3d-4e5f60718293"
DIGEST = "ab" * 32


def test_the_layout_puts_kind_then_owner_first() -> None:
    assert output_part_key("alice", RUN, 5 << 32 | 7, "stdout", 3) == (
        f"output/alice/{RUN}/00000000021474836487/stdout/0000000003"
    )
    assert output_prefix("alice", RUN) == f"output/alice/{RUN}/"
    assert output_prefix("alice", RUN, 9) == f"output/alice/{RUN}/00000000000000000009/"
    assert output_stream_prefix("alice", RUN, 9, "stderr").endswith("/stderr/")
    assert result_key("team.a@corp", RUN, "report.json") == f"results/team.a@corp/{RUN}/report.json"
    assert results_prefix("alice", RUN) == f"results/alice/{RUN}/"
    assert artifact_key("alice", DIGEST) == f"artifacts/alice/{DIGEST}"
    assert owner_prefix(BlobKind.ARTIFACTS, "alice") == "artifacts/alice/"


def test_numbers_sort_as_keys_in_their_order() -> None:
    tokens = [0, 9, 10, 1 << 32, (1 << 64) - 1]
    keys = [output_part_key("o", RUN, t, "stdout", 0) for t in tokens]
    assert sorted(keys) == keys
    parts = [output_part_key("o", RUN, 1, "stdout", p) for p in (0, 1, 9, 10, 10**10 - 1)]
    assert sorted(parts) == parts


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: output_part_key("a/b", RUN, 1, "stdout", 0), "owner"),
        (lambda: output_part_key("..", RUN, 1, "stdout", 0), "owner"),
        (lambda: output_part_key("", RUN, 1, "stdout", 0), "owner"),
        (lambda: output_part_key("x" * 129, RUN, 1, "stdout", 0), "owner"),
        (lambda: output_part_key("alice", "../bob", 1, "stdout", 0), "run_id"),
        (lambda: output_part_key("alice", RUN, -1, "stdout", 0), "fencing_token"),
        (lambda: output_part_key("alice", RUN, 1 << 64, "stdout", 0), "fencing_token"),
        (lambda: output_part_key("alice", RUN, True, "stdout", 0), "fencing_token"),
        (lambda: output_part_key("alice", RUN, 1, "stdin", 0), "stream"),
        (lambda: output_part_key("alice", RUN, 1, "stdout", 10**10), "part"),
        (lambda: result_key("alice", RUN, "sub/dir"), "name"),
        (lambda: result_key("alice", RUN, ".env"), "name"),
        (lambda: artifact_key("alice", "AB" * 32), "sha256"),
        (lambda: artifact_key("alice", "ab" * 31), "sha256"),
        (lambda: owner_prefix(BlobKind.OUTPUT, "alice/"), "owner"),
    ],
)
def test_a_part_that_could_leave_its_segment_is_refused(build, field: str) -> None:
    with pytest.raises(InvalidBlobKey) as refused:
        build()
    assert refused.value.field == field


def test_owner_of_reads_the_owner_back_and_refuses_other_keys() -> None:
    assert owner_of(output_part_key("alice", RUN, 1, "stdout", 0)) == "alice"
    assert owner_of(artifact_key("bob", DIGEST)) == "bob"
    for key in ("output/alice", "logs/alice/x", "alice", "output//x"):
        with pytest.raises(InvalidBlobKey):
            owner_of(key)


owners = st.text(alphabet=st.sampled_from("abcAB09._-@/ \\%é\0"), min_size=0, max_size=12)


@settings(max_examples=400, deadline=None, database=None)
@given(mine=owners, theirs=owners, name=owners)
def test_no_key_of_one_owner_names_another_owners_blobs(mine: str, theirs: str, name: str) -> None:
    """Whatever two owners (and a result name) are sent, a key built for one is either
    refused or lies under that owner's prefixes and under none of the other's."""
    if mine == theirs:
        return
    builders = [
        lambda o: output_part_key(o, RUN, 1, "stdout", 0),
        lambda o: result_key(o, RUN, name or "n"),
        lambda o: artifact_key(o, DIGEST),
    ]
    for build in builders:
        try:
            key = build(mine)
        except InvalidBlobKey:
            continue
        assert owner_of(key) == mine
        assert key.startswith(owner_prefix(BlobKind(key.split("/")[0]), mine))
        for kind in BlobKind:
            try:
                other = owner_prefix(kind, theirs)
            except InvalidBlobKey:
                continue
            assert not key.startswith(other)


@pytest.mark.parametrize(
    "key",
    ["a", "a/b/c", "A-Z_0.9@x", "x" * 255, "/".join(["y" * 95] * 8)],  # 767 characters
)
def test_keys_of_the_alphabet_pass(key: str) -> None:
    assert check_key(key) == key


def test_key_bounds() -> None:
    with pytest.raises(InvalidBlobKey, match="at most 768"):
        check_key("/".join(["y" * 96] * 8) + "z")
    assert len("/".join(["y" * 95] * 8)) < MAX_KEY
    with pytest.raises(InvalidBlobKey):
        check_key(b"bytes")  # type: ignore[arg-type]


def test_prefixes_folders_and_a_stores_own_prefix() -> None:
    assert check_prefix("") == ""
    assert check_prefix("out/al") == "out/al"
    assert check_prefix("out/alice/") == "out/alice/"
    assert check_folder("out/alice/") == "out/alice/"
    for bad in ("out/alice", ""):
        with pytest.raises(InvalidBlobKey):
            check_folder(bad)
    assert check_store_prefix("/team/blobs/") == "team/blobs/"
    assert check_store_prefix("") == ""
    for bad in ("a//b", "../x", "x" * 200):
        with pytest.raises(InvalidBlobKey):
            check_store_prefix(bad)
