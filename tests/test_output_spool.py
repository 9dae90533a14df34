"""A worker's output spool (``worker/output_spool``) on a real directory: paused output
kept on disk and sent in order once resumed, the bound that cuts it, and a result that
waits for its spool a bounded time; the spool of a worker killed mid-spool removed at
the next worker's start, never that of a worker still running (real processes)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shardcron.worker.output_spool import OutputSpoolConfig, OutputSpools
from tests.support.waiting import until

RUN, TOKEN = "r-1", 7


class Sink:
    """The stream a run's output goes to: what it was given, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.room = asyncio.Event()
        self.room.set()

    def output(self, run_id: str, token: int, stream: str, data: bytes) -> None:
        assert (run_id, token) == (RUN, TOKEN)
        self.got.append((stream, data))

    async def output_room(self) -> None:
        await self.room.wait()

    def data(self) -> bytes:
        return b"".join(d for _, d in self.got)


def emit(spools: OutputSpools, sink: Sink, stream: str, data: bytes) -> None:
    """What the worker does with a run's output: the spool's, or the stream's."""
    if not spools.takes(RUN, TOKEN, stream, data):
        sink.output(RUN, TOKEN, stream, data)


@pytest.fixture
def sink() -> Sink:
    return Sink()


def spools_on(tmp_path: Path, sink: Sink, **config: object) -> OutputSpools:
    return OutputSpools(
        OutputSpoolConfig(directory=tmp_path / "spool", **config),  # type: ignore[arg-type]
        lambda run_id, token: sink,
    )


async def test_paused_output_is_kept_on_disk_and_sent_in_order_once_resumed(
    tmp_path: Path, sink: Sink
) -> None:
    spools = spools_on(tmp_path, sink)
    emit(spools, sink, "stdout", b"before\n")
    spools.pause(RUN, TOKEN)
    written = [("stdout", b"a" * 300_000), ("stderr", b"E\n"), ("stdout", b"b" * 700_000)]
    for stream, data in written:
        emit(spools, sink, stream, data)
    assert sink.data() == b"before\n"  # nothing went to the stream while paused
    [file] = spools.directory().iterdir()
    assert file.stat().st_size > 1_000_000 and spools.bytes == file.stat().st_size
    sink.room.clear()  # the stream is slow: the drain waits for it
    spools.resume(RUN, TOKEN)
    await until(lambda: sink.got[1:], 5, "the spool's first step sent")
    emit(spools, sink, "stdout", b"while draining\n")  # behind what the spool holds
    sink.room.set()
    ended = await spools.settle(RUN, TOKEN, lambda: False)
    assert (ended.truncated, ended.dropped_bytes) == ("", 0)
    expected = b"before\n" + b"".join(d for _, d in written) + b"while draining\n"
    assert sink.data() == expected
    assert ("stderr", b"E\n") in sink.got
    assert spools.bytes == 0 and not file.exists()
    emit(spools, sink, "stdout", b"live")  # the spool is gone: straight to the stream
    assert sink.got[-1] == ("stdout", b"live")


async def test_output_past_the_bound_is_cut_never_holed_and_said(
    tmp_path: Path, sink: Sink
) -> None:
    spools = spools_on(tmp_path, sink, limit_bytes=10_000)
    spools.pause(RUN, TOKEN)
    for i in range(20):
        emit(spools, sink, "stdout", b"%04d" % i + b"." * 996)
    spools.resume(RUN, TOKEN)
    emit(spools, sink, "stdout", b"after the cut")  # dropped too: the output ends at the cut
    ended = await spools.settle(RUN, TOKEN, lambda: False)
    assert ended.truncated == "blob store unavailable for 1 s"
    kept = sink.data()
    assert kept == b"".join(b"%04d" % i + b"." * 996 for i in range(len(kept) // 1000))
    assert 8_000 <= len(kept) < 10_000
    assert ended.dropped_bytes == 20_000 + len(b"after the cut") - len(kept)
    assert spools.dropped_bytes == ended.dropped_bytes  # counted for the worker's metrics
    assert spools.spooled_bytes == len(kept) and spools.bytes == 0


async def test_a_result_waits_for_its_spool_a_bounded_time_then_says_what_was_cut(
    tmp_path: Path, sink: Sink
) -> None:
    spools = spools_on(tmp_path, sink, drain_wait=0.5)
    spools.pause(RUN, TOKEN)
    emit(spools, sink, "stdout", b"x" * 5000)
    ended = await spools.settle(RUN, TOKEN, lambda: False)  # never resumed
    assert ended.dropped_bytes == 5000
    assert ended.truncated.startswith("blob store unavailable for ")
    assert sink.got == [] and list(spools.directory().iterdir()) == []

    spools.pause(RUN, TOKEN)
    emit(spools, sink, "stdout", b"y" * 5000)
    settling = asyncio.ensure_future(spools.settle(RUN, TOKEN, lambda: False))
    await asyncio.sleep(0.1)
    assert not settling.done()
    spools.resume(RUN, TOKEN)  # the store is back within the wait: all of it goes
    ended = await settling
    assert (ended.truncated, ended.dropped_bytes) == ("", 0)
    assert sink.data() == b"y" * 5000


async def test_no_spool_keeps_nothing(tmp_path: Path, sink: Sink) -> None:
    spools = spools_on(tmp_path, sink, limit_bytes=0)
    assert not spools.enabled
    spools.pause(RUN, TOKEN)
    emit(spools, sink, "stdout", b"as ever")
    assert sink.data() == b"as ever"


async def test_spool_files_an_earlier_process_left_are_removed(tmp_path: Path, sink: Sink) -> None:
    (tmp_path / "spool").mkdir()
    (tmp_path / "spool" / "0-1234-99").write_bytes(b"x" * 100)  # an earlier version's
    spools = spools_on(tmp_path, sink)
    spools.pause(RUN, TOKEN)
    emit(spools, sink, "stdout", b"kept")
    assert not (tmp_path / "spool" / "0-1234-99").exists()
    [kept] = spools.directory().iterdir()  # this process's own
    assert kept.read_bytes().endswith(b"kept")
    spools.close()
    assert [p.name for p in (tmp_path / "spool").iterdir()] == [".sweep"]


_SPOOLER = """
import sys, time
from pathlib import Path
from shardcron.worker.output_spool import OutputSpoolConfig, OutputSpools
where = Path(sys.argv[1]) if sys.argv[1] else None
spools = OutputSpools(OutputSpoolConfig(directory=where), lambda run, token: None)
spools.pause("r", 1)
spools.takes("r", 1, "stdout", b"x" * (1 << 20))
print(spools.directory(), flush=True)
time.sleep(120)
"""


def _spooler(where: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], Path]:
    """A process that spools 1 MiB of a paused run's output, then lives on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SPOOLER, where], stdout=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.stdout is not None
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir() and sum(f.stat().st_size for f in folder.iterdir()) > 1 << 20
    return proc, folder


@pytest.mark.parametrize("default_directory", [False, True])
def test_a_killed_workers_spool_goes_at_the_next_start_a_live_ones_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, default_directory: bool
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    where = "" if default_directory else str(tmp_path / "spool")
    killed, killed_folder = _spooler(where, {"TMPDIR": str(tmp_path)})
    alive, alive_folder = _spooler(where, {"TMPDIR": str(tmp_path)})
    try:
        assert killed_folder.parent == alive_folder.parent
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert killed_folder.exists()  # nothing removed it yet
        spools = OutputSpools(
            OutputSpoolConfig(directory=Path(where) if where else None), lambda r, t: None
        )  # a worker starting: it spools nothing yet
        assert not killed_folder.exists() and not Path(f"{killed_folder}.lock").exists()
        assert alive_folder.exists() and any(alive_folder.iterdir())
        spools.close()
    finally:
        alive.kill()
        killed.kill()
        alive.wait()
