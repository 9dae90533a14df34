"""Hostile artifacts: archives built to make the node's check read without bound, or
whose links each look inside but together lead out. Each is refused by the check, on
the field ``artifact``, naming the entry, before anything is stored."""

from __future__ import annotations

import gzip
import io
import resource
import tarfile

import pytest

from shardcron.blobs.archives import ArchiveLimits, check_archive
from shardcron.client.errors import InvalidArgument


def entry(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def tar_of(entries: list[tarfile.TarInfo], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT) as tar:
        for item in entries:
            tar.addfile(item)
    return buf.getvalue()


def refusal(archive: bytes, limits: ArchiveLimits | None = None) -> str:
    with pytest.raises(InvalidArgument) as refused:
        check_archive(io.BytesIO(archive), limits or ArchiveLimits())
    assert refused.value.field == "artifact"
    return refused.value.reason


def header_bomb(kind: bytes, size: int) -> bytes:
    """A gzip of a tar whose first header (a GNU long name, or a GNU sparse file that
    says it unpacks to nothing) is followed by ``size`` bytes: a few hundred KiB
    compressed."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        head = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "z")
        head.type, head.size = kind, size
        gz.write(head._create_header(head.get_info(), tarfile.GNU_FORMAT, "utf-8", "strict"))
        zeros = b"a" * (1 << 20)
        for _ in range(size >> 20):
            gz.write(zeros)
        gz.write(tarfile.TarInfo("x").tobuf(tarfile.GNU_FORMAT) + b"\0" * 1024)
    return buf.getvalue()


def test_a_long_name_header_of_hundreds_of_mib_is_refused_without_being_held() -> None:
    bomb = header_bomb(tarfile.GNUTYPE_LONGNAME, 192 << 20)
    assert len(bomb) < 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert "header passes" in refusal(bomb)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 << 10  # not the 192 MiB the header claimed


def test_a_sparse_entry_claiming_no_bytes_is_not_decompressed_past_the_bound() -> None:
    bomb = header_bomb(tarfile.GNUTYPE_SPARSE, 8 << 20)
    reason = refusal(bomb, ArchiveLimits(unpacked_bytes=1 << 20, entries=10))
    assert "passes" in reason and "bytes of tar stream" in reason


def test_a_path_longer_than_path_max_is_refused_by_name() -> None:
    reason = refusal(tar_of([entry("ok"), entry("d" * 10_000)]))
    assert "a path passes 4096 bytes" in reason


@pytest.mark.parametrize(
    ("entries", "culprit"),
    [
        (  # each link inside as written; the second, through the first, one level up
            [
                entry("a/b/c", tarfile.DIRTYPE),
                entry("a/b/c/s", tarfile.SYMTYPE, "."),
                entry("esc", tarfile.SYMTYPE, "a/b/c/s/../../../.."),
            ],
            "esc",
        ),
        (  # the link it goes through comes later, where nothing was yet
            [
                entry("esc", tarfile.SYMTYPE, "d/x/x/x/../../../.."),
                entry("d", tarfile.DIRTYPE),
                entry("d/x", tarfile.SYMTYPE, "."),
            ],
            "esc",
        ),
        (  # a hard link through a symlink, to a file outside
            [
                entry("d", tarfile.DIRTYPE),
                entry("d/s", tarfile.SYMTYPE, "."),
                entry("h", tarfile.LNKTYPE, "d/s/s/../../passwd"),
            ],
            "h",
        ),
        (  # a loop of links
            [entry("p", tarfile.SYMTYPE, "q"), entry("q", tarfile.SYMTYPE, "p")],
            "p",
        ),
    ],
)
def test_links_that_lead_out_only_together_are_refused(
    entries: list[tarfile.TarInfo], culprit: str
) -> None:
    assert f"entry {culprit!r}" in refusal(tar_of(entries))


def test_a_symlink_may_not_replace_an_entry_nor_be_replaced() -> None:
    replaced_file = [
        entry("x"),
        entry("esc", tarfile.SYMTYPE, "x/.."),
        entry("x", tarfile.SYMTYPE, "."),
    ]
    assert "'x': a symlink replaced, or replacing" in refusal(tar_of(replaced_file))
    replaced_link = [entry("x", tarfile.SYMTYPE, "y"), entry("x")]
    assert "'x': a symlink replaced, or replacing" in refusal(tar_of(replaced_link))


def test_links_through_links_that_stay_inside_pass() -> None:
    archive = tar_of(
        [
            entry("lib/real/tool"),
            entry("lib/cur", tarfile.SYMTYPE, "real"),
            entry("bin/tool", tarfile.SYMTYPE, "../lib/cur/tool"),
            entry("bin/up", tarfile.SYMTYPE, "../lib/cur/.."),
            entry("hard", tarfile.LNKTYPE, "lib/cur/tool"),
            entry("x"),
            entry("x"),  # a file written twice: the later one stays
        ],
        mode="w:gz",
    )
    assert check_archive(io.BytesIO(archive), ArchiveLimits()).entries == 7


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_each_compression_is_read_and_the_callers_file_stays_open(mode: str) -> None:
    buf = io.BytesIO(tar_of([entry("a/b"), entry("c", tarfile.SYMTYPE, "a/b")], mode=mode))
    assert check_archive(buf, ArchiveLimits()).entries == 2
    assert not buf.closed  # the node streams it to the blob store next
