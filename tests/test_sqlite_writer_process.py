"""The SQLite store's writer as a process of its own (``writer_process=True``, as
``shardcron dev`` opens it): what happens when it dies, when the node dies, and what
crosses the pipe. The contract suite runs on this store too (``sqlite-process``)."""

from __future__ import annotations

import asyncio
import functools
import marshal
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shardcron.client.errors import InvalidArgument, Unavailable
from shardcron.client.types import RunState
from shardcron.coordinator.metrics import Metrics, TimedStore
from shardcron.coordinator.sqlite import writer_process, writes
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.store_rules import SchemaMismatch
from tests.support.store_builders import CONTRACT_CONFIG, create, make_job
from tests.support.waiting import until

WRITER = "shardcron.coordinator.sqlite.writer_process"


def writers(parent: int) -> list[int]:
    """The live writer processes ``parent`` started (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and alive(int(entry), parent=parent):
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            if WRITER in cmdline.decode(errors="replace"):
                found.append(int(entry))
    return found


def alive(pid: int, *, parent: int | None = None) -> bool:
    """``pid`` runs (not a zombie), and is a child of ``parent`` if given."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    return state != "Z" and (parent is None or int(ppid) == parent)


async def test_a_killed_writer_fails_what_waits_and_the_next_write_starts_another(
    tmp_path: Path,
) -> None:
    metrics = Metrics()
    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    timed = TimedStore(store, metrics)
    await store.open()

    def restarts() -> float | None:
        return metrics.registry.get_sample_value("shardcron_store_writer_restarts_total")

    try:
        kept = await create(timed, make_job())
        [writer] = writers(os.getpid())
        assert restarts() == 0
        os.kill(writer, signal.SIGSTOP)  # holds the next write unread in the pipe
        lost = make_job()
        waiting = asyncio.ensure_future(store.create_jobs([NewJob(job=lost)]))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        os.kill(writer, signal.SIGKILL)
        with pytest.raises(Unavailable, match="writer process ended"):
            await waiting
        later = await create(timed, make_job())  # on a new writer
        [again] = writers(os.getpid())
        assert again != writer
        assert restarts() == 1
        got = await store.get_jobs([kept.id, lost.id, later.id])
        assert set(got) == {kept.id, later.id}
    finally:
        await store.close()
    assert writers(os.getpid()) == []


async def test_a_node_killed_outright_takes_its_writer_with_it(tmp_path: Path) -> None:
    """The writer reads the end of its pipe and exits; what was acknowledged is kept."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from shardcron.coordinator.sqlite.store import SqliteStore
        from shardcron.coordinator.store import NewJob
        from tests.support.store_builders import CONTRACT_CONFIG, make_job

        async def main():
            store = SqliteStore({str(tmp_path / "s.db")!r}, **CONTRACT_CONFIG, writer_process=True)
            await store.open()
            job = make_job()
            await store.create_jobs([NewJob(job=job)])
            print(job.id, flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    node = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        assert node.stdout is not None
        job_id = (await asyncio.to_thread(node.stdout.readline)).strip()
        [writer] = writers(node.pid)
        node.send_signal(signal.SIGKILL)
        node.wait()
        await until(lambda: not alive(writer), timeout=10, what="the writer's exit")
    finally:
        node.kill()
        node.wait()
    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    await store.open()
    try:
        assert set(await store.get_jobs([job_id])) == {job_id}
    finally:
        await store.close()


async def test_a_layout_mismatch_is_raised_from_the_writer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    await store.open()
    await store.close()
    other = {**CONTRACT_CONFIG, "shard_count": CONTRACT_CONFIG["shard_count"] + 1}
    wrong = SqliteStore(tmp_path / "s.db", **other, writer_process=True)
    with pytest.raises(SchemaMismatch, match="shard_count"):
        await wrong.open()
    await until(lambda: writers(os.getpid()) == [])


async def test_close_commits_every_write_queued_before_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    await store.open()
    jobs = [make_job() for _ in range(50)]
    writes = [asyncio.ensure_future(create(store, job)) for job in jobs]
    await asyncio.sleep(0)  # every write handed to the writer
    await store.close()
    await asyncio.gather(*writes)
    again = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    await again.open()
    try:
        assert set(await again.get_jobs([j.id for j in jobs])) == {j.id for j in jobs}
    finally:
        await again.close()


async def test_a_write_that_cannot_cross_the_pipe_fails_alone(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    await store.open()
    try:
        local = asyncio.ensure_future(store._db.write(lambda conn: 1))  # no pickle for it
        fine = asyncio.ensure_future(create(store, make_job()))
        with pytest.raises(Exception, match="pickle"):
            await local
        assert (await fine).id
        assert await create(store, make_job())
    finally:
        await store.close()


def refuse(conn: object) -> None:
    raise InvalidArgument("spec.name", "made up")  # its pickle does not come back whole


async def test_an_error_that_does_not_pickle_whole_arrives_in_words(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG, writer_process=True)
    await store.open()
    try:
        with pytest.raises(RuntimeError, match="InvalidArgument: spec.name: made up"):
            await store._db.write(refuse)
        assert await create(store, make_job())  # the same writer goes on
    finally:
        await store.close()


def test_plain_values_cross_the_pipe_marshalled_and_come_back_as_sent() -> None:
    message = [(1, "commit", ([("r", True, None, b"\x00", 2**70, 1.5, [3])], []), 4)]
    data = writer_process.encode(message)
    assert data[:1] == b"m"
    back = writer_process.decode(data)
    assert back == message
    assert type(back[0][2][0][0]) is tuple and back[0][2][0][0][1] is True
    # a value marshal does not carry (a str subclass, an exception) goes as a pickle
    for other in [(RunState.PENDING,), ValueError("no")]:
        data = writer_process.encode(other)
        assert data[:1] == b"p"
        assert repr(writer_process.decode(data)) == repr(other)
    with pytest.raises(ValueError, match="unknown kind"):
        writer_process.decode(b"x" + marshal.dumps(1))


def test_only_writes_functions_of_plain_arguments_go_by_name() -> None:
    rows = [("shard", 1)]
    plain = writer_process._plain_ops([(7, functools.partial(writes.save_cursors, rows), 1)])
    assert plain == [(7, "save_cursors", (rows,), 1)]
    op_id, fn, count = writer_process._op_of(plain[0])
    assert (op_id, fn.func, fn.args, count) == (7, writes.save_cursors, (rows,), 1)
    assert writer_process._plain_ops([(1, lambda conn: 1, 1)]) is None
    by_keyword = functools.partial(writes.save_cursors, rows=rows)
    assert writer_process._plain_ops([(1, by_keyword, 1)]) is None
    not_sent_by_name = functools.partial(writes.expire_runs, "", 10)
    assert writer_process._plain_ops([(1, not_sent_by_name, 1)]) is None


def test_a_write_by_name_whose_arguments_do_not_marshal_goes_pickled_and_runs_the_same() -> None:
    at = datetime(2026, 6, 1, tzinfo=UTC)
    plain = writer_process._plain_ops([(3, functools.partial(writes.save_cursors, [(1, at)]), 1)])
    assert plain is not None
    data = writer_process.encode(plain)
    assert data[:1] == b"p", "a datetime does not marshal"
    op_id, fn, rows = writer_process._op_of(writer_process.decode(data)[0])
    assert (op_id, fn.func, fn.args, rows) == (3, writes.save_cursors, ([(1, at)],), 1)
