"""A command's result files on the worker, against real processes: what its supervisor
takes out of ``$SHARDCRON_RESULT_DIR`` (hostile input: links, folders, odd names, files
past the bounds), each left out with a note, and the pieces the worker sends."""

from __future__ import annotations

import hashlib
import os
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shardcron.client.limits import is_result_name
from shardcron.client.stream import ResultFilePiece
from shardcron.client.types import CommandTask, RunState
from shardcron.worker import CommandExecutor, RunContext
from shardcron.worker.containment import results as supervisor_results
from shardcron.worker.containment.results import collect
from shardcron.worker.sandbox import Sandbox, SandboxConfig
from tests.support.containment import needs_root
from tests.support.waiting import until


@pytest.fixture
async def executor() -> AsyncIterator[CommandExecutor]:
    made = CommandExecutor()
    yield made
    await made.close()


def script(body: str) -> CommandTask:
    return CommandTask(argv=("/bin/sh", "-c", textwrap.dedent(body)))


async def run_with_results(executor: CommandExecutor, task: CommandTask, run_id: str = "r1"):
    pieces: list[ResultFilePiece] = []
    ctx = RunContext(run_id=run_id, task=task, fencing_token=7, on_result_piece=pieces.append)
    res = await executor.execute(ctx)
    files: dict[str, bytearray] = {}
    for p in pieces:
        assert p.fencing_token == 7 and p.run_id == run_id
        data = files.setdefault(p.name, bytearray())
        assert p.offset == len(data)  # in order, no gap
        data.extend(p.data)
    lasts = {p.name for p in pieces if p.last}
    assert lasts == set(files)
    return res, {k: bytes(v) for k, v in files.items()}, pieces


async def test_files_are_sent_with_their_digest(executor: CommandExecutor) -> None:
    task = script(
        """
        printf 'hello' > "$SHARDCRON_RESULT_DIR/report.txt"
        head -c 200000 /dev/zero > "$SHARDCRON_RESULT_DIR/big.bin"
        : > "$SHARDCRON_RESULT_DIR/empty"
        """
    )
    res, files, pieces = await run_with_results(executor, task)
    assert res.state == RunState.SUCCEEDED, res.error
    assert files == {"report.txt": b"hello", "big.bin": b"\0" * 200000, "empty": b""}
    digests = {p.name: p.sha256 for p in pieces}
    assert digests["report.txt"] == hashlib.sha256(b"hello").hexdigest()
    assert len([p for p in pieces if p.name == "big.bin"]) >= 3  # in bounded pieces
    assert res.results_note == ""


async def test_hostile_entries_are_left_out_and_said(
    executor: CommandExecutor, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    task = script(
        f"""
        d="$SHARDCRON_RESULT_DIR"
        printf ok > "$d/good.txt"
        ln -s {secret} "$d/link"
        mkdir "$d/sub" && printf x > "$d/sub/inner"
        mkfifo "$d/fifo"
        printf x > "$d/.hidden"
        printf x > "$d/sp ace"
        """
    )
    res, files, _ = await run_with_results(executor, task)
    assert res.state == RunState.SUCCEEDED, res.error
    assert files == {"good.txt": b"ok"}
    note = res.results_note
    for said in ("link: left out: a symbolic link", "sub: left out: a directory",
                 "fifo: left out: not a regular file", "'.hidden': not a plain file name",
                 "'sp ace': not a plain file name"):  # fmt: skip
        assert said in note, note


async def test_a_result_dir_replaced_by_a_link_gives_nothing(
    executor: CommandExecutor, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "stolen").write_text("x")
    task = script(
        f'rmdir "$SHARDCRON_RESULT_DIR" && ln -s {tmp_path}/other "$SHARDCRON_RESULT_DIR"'
    )
    res, files, _ = await run_with_results(executor, task)
    assert files == {}
    assert "$SHARDCRON_RESULT_DIR could not be read" in res.results_note


async def test_each_run_starts_with_an_empty_result_dir(executor: CommandExecutor) -> None:
    first = script('printf a > "$SHARDCRON_RESULT_DIR/a"; echo "$SHARDCRON_RESULT_DIR"')
    _, files, _ = await run_with_results(executor, first, "r1")
    assert files == {"a": b"a"}
    second = script(
        'n=$(ls -A "$SHARDCRON_RESULT_DIR" | wc -l); echo $n > "$SHARDCRON_RESULT_DIR/count"'
    )
    _, files, _ = await run_with_results(executor, second, "r2")
    assert files == {"count": b"0\n"}  # nothing of the run before


def test_bounds_leave_files_out_and_say_so(tmp_path: Path) -> None:
    home = tmp_path / "run"
    (home / "results").mkdir(parents=True)
    for i in range(5):
        (home / "results" / f"f{i}").write_bytes(b"x" * (10 * (i + 1)))
    (home / "results" / "huge").write_bytes(b"y" * 1000)
    found = collect(str(home), None, [3, 100, 35])
    names = [f[0] for f in found["files"]]
    assert names == ["f0", "f1"]  # 10 + 20 bytes; f2 (30) would pass the run's 35
    notes = "; ".join(found["notes"])
    assert "f2: left out: past the bytes a run's result files may hold together" in notes
    assert "huge: left out: 1000 bytes, past the 100" in notes
    outbox = Path(found["dir"])
    assert sorted(os.listdir(outbox)) == ["f0", "f1"]
    found = collect(str(tmp_path / "again"), None, [3, 100, 35])
    assert found == {"dir": "", "files": [], "notes": []}  # no result dir: nothing


def test_count_bound_says_how_many_were_left_out(tmp_path: Path) -> None:
    home = tmp_path / "run"
    (home / "results").mkdir(parents=True)
    for i in range(5):
        (home / "results" / f"f{i}").write_bytes(b"x")
    found = collect(str(home), None, [2, 100, 1000])
    assert [f[0] for f in found["files"]] == ["f0", "f1"]
    assert found["notes"] == ["3 files left out: a run keeps 2"]


def test_files_of_another_user_are_left_out(tmp_path: Path) -> None:
    home = tmp_path / "run"
    (home / "results").mkdir(parents=True)
    (home / "results" / "mine").write_bytes(b"x")
    found = collect(str(home), os.getuid() + 1, [10, 100, 1000])
    assert found["files"] == []
    assert found["notes"] == ["mine: left out: not owned by the run's user"]
    assert found["dir"] == f"{home}.results"  # made, empty: the worker removes it


async def test_the_worker_removes_the_copies_even_when_none_was_kept(
    executor: CommandExecutor,
) -> None:
    task = script('ln -s /etc "$SHARDCRON_RESULT_DIR/x"; echo "$SHARDCRON_RESULT_DIR"')
    out: list[bytes] = []
    ctx = RunContext(run_id="r9", task=task, on_output=lambda _s, d: out.append(d))
    res = await executor.execute(ctx)
    assert "x: left out: a symbolic link" in res.results_note
    home = os.path.dirname(b"".join(out).decode().strip())
    assert not os.path.exists(f"{home}.results")  # the worker's copies: gone when it returns
    # the run's own directory is its supervisor's to remove, after its report
    await until(lambda: not os.path.lexists(home), what=f"{home} removed")


@pytest.mark.parametrize(
    "name", ["a", "A.b-c_d@e", "x" * 255, "", ".a", "-a", "a/b", "a b", "é", "x" * 256, "..", "_a"]
)
def test_the_supervisor_and_the_codec_agree_on_names(name: str) -> None:
    assert supervisor_results.is_name(name) == is_result_name(name)


@needs_root
async def test_a_run_of_its_own_user_keeps_its_files() -> None:
    """A run with a user of its own writes into a result dir that user owns; its files
    (owned by it) are taken, and the copies left for the worker are gone after."""
    sandbox = Sandbox(
        SandboxConfig(containment="none", run_as_range=(232000, 232999)),
        f"results-{uuid.uuid4().hex[:6]}",
    )
    executor = CommandExecutor(sandbox=sandbox)
    try:
        task = script('id -u > "$SHARDCRON_RESULT_DIR/uid"')
        pieces: list[ResultFilePiece] = []
        ctx = RunContext(run_id="r1", task=task, owner="alice", on_result_piece=pieces.append)
        res = await executor.execute(ctx)
        assert res.state == RunState.SUCCEEDED, res.error
        [piece] = pieces
        assert piece.name == "uid" and 232000 <= int(piece.data) <= 232999
        assert res.results_note == ""
        assert sandbox.dirs is not None
        assert [p for p in sandbox.dirs.base.iterdir() if p.name.endswith(".results")] == []
    finally:
        await sandbox.close()
