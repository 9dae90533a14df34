"""A run's whole output through ``shardcron dev``'s blob store (a directory under its
data dir), read back whole and by range through the SDK, the CLI and HTTP, followed
live; the job store keeping only its tail; other owners refused. One dev server for
the module (the harness's ``dev``), each test with an owner of its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.client.errors import InvalidArgument, NotFound
from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, Resources, RunState
from shardcron.coordinator.output_blobs import TAIL_BYTES
from tests.e2e.harness import DevServer
from tests.support.containment import shared_dir
from tests.support.waiting import wait_until

LINES = 16_000_000  # `seq 1 LINES`: 129 MiB of output
BIG_RSS_BOUND = 300 << 20  # bytes: the node's peak RSS through the big run


def sh(script: str) -> JobSpec:
    return JobSpec(name="out", task=CommandTask(argv=("sh", "-c", script)))


def seq_bytes(n: int) -> bytes:
    return b"".join(b"%d\n" % i for i in range(1, n + 1))


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def big(dev: DevServer) -> Iterator[tuple[Client, str, str]]:
    """One run of ``seq 1 LINES``: its client, run id and the sha256 of what it wrote."""
    c = dev.client()
    job = c.create_job(sh(f"seq 1 {LINES}"))
    [run] = c.wait_job_runs(job.id, count=1, timeout=120)
    assert run.state == RunState.SUCCEEDED
    expected = hashlib.sha256(seq_bytes(LINES)).hexdigest()
    yield c, run.id, expected
    c.close()


def test_big_output_reads_back_whole_with_the_node_bounded(
    dev: DevServer, big: tuple[Client, str, str]
) -> None:
    c, run_id, expected = big
    digest, size = hashlib.sha256(), 0
    for chunk in c.read_output(run_id):
        assert chunk.offset == size
        digest.update(chunk.data)
        size += len(chunk.data)
    assert digest.hexdigest() == expected
    assert c.get_run(run_id).output_bytes == size == len(seq_bytes(LINES))
    assert dev.proc is not None
    assert peak_rss(dev.proc.pid) < BIG_RSS_BOUND


def test_big_output_by_head_tail_and_range_sdk_cli_http(
    dev: DevServer, big: tuple[Client, str, str]
) -> None:
    c, run_id, _ = big
    whole_head = seq_bytes(10_000)
    last = b"".join(b"%d\n" % i for i in range(LINES - 9, LINES + 1))
    size = c.get_run(run_id).output_bytes

    def read(**kw: int) -> bytes:
        return b"".join(ch.data for ch in c.read_output(run_id, **kw))

    assert read(limit=20) == whole_head[:20]
    assert read(offset=-len(last)) == last
    assert read(offset=10_000, limit=5_000) == whole_head[10_000:15_000]
    # across a part's end (parts are 4 MiB): the same bytes as the whole output has
    middle = read(offset=(4 << 20) - 100, limit=200)
    assert len(middle) == 200 and middle.count(b"\n") >= 20
    owner = c.owner
    cli = dev.cli("run", "logs", run_id, "--head", "12", owner=owner).stdout
    assert cli == whole_head[:12].decode()
    assert dev.cli("run", "logs", run_id, "--tail", str(len(last)), owner=owner).stdout == (
        last.decode()
    )
    assert dev.cli("run", "logs", run_id, "--bytes", "2-9", owner=owner).stdout == (
        whole_head[2:10].decode()
    )
    url = f"{dev.http_url}/v1/runs/{run_id}/output?format=text&offset={size - 7}&limit=5"
    req = urllib.request.Request(url, headers={"X-Shardcron-Owner": owner})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.read() == last[-7:-2]


def test_job_store_keeps_only_the_tail(dev: DevServer, big: tuple[Client, str, str]) -> None:
    _, run_id, _ = big
    with sqlite3.connect(f"file:{dev.data_dir / 'shardcron.db'}?mode=ro", uri=True) as db:
        (kept,) = db.execute(
            "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM run_output WHERE run_id = ?", (run_id,)
        ).fetchone()
    assert 0 < kept <= TAIL_BYTES + 1


def test_other_owners_cannot_read_it(dev: DevServer, big: tuple[Client, str, str]) -> None:
    _, run_id, _ = big
    with dev.client() as other, pytest.raises(NotFound):
        list(other.read_output(run_id, limit=10))


@pytest.mark.parametrize(
    "ask", [{"follow": True, "limit": 10}, {"limit": -1}, {"limit": 1 << 53}], ids=str
)
def test_a_bad_limit_is_refused_naming_the_field(
    big: tuple[Client, str, str], ask: dict[str, int]
) -> None:
    c, run_id, _ = big
    with pytest.raises(InvalidArgument) as e:
        list(c.read_output(run_id, **ask))  # type: ignore[arg-type]
    assert e.value.field == "limit"


def test_a_jobs_output_limit_cuts_its_output_and_says_so(client: Client) -> None:
    spec = sh("seq 1 200000")
    spec = spec.replace(resources=Resources(output_limit_bytes=1000))
    job = client.create_job(spec)
    assert client.get_job(job.id).spec.resources.output_limit_bytes == 1000
    [run] = client.wait_job_runs(job.id, count=1, timeout=30)
    whole = b"".join(c.data for c in client.read_output(run.id))
    written = seq_bytes(200000)
    assert whole[:1000] == written[:1000]
    # then the job store's tail: the last bytes written, and the notice at the run's end
    notice = b"\n[shardcron: output truncated: the limit of 1000 bytes kept per run was reached]\n"
    assert whole.endswith(b"199999\n200000\n" + notice)
    assert len(whole) < 1000 + 70_000


def test_follow_sees_output_while_the_run_runs(client: Client) -> None:
    with shared_dir() as shared:
        flag = shared / f"go-{uuid.uuid4().hex[:8]}"
        job = client.create_job(
            sh(f"seq 1 100000; echo half; while [ ! -e {flag} ]; do sleep 0.05; done; echo end")
        )
        run = wait_until(
            lambda: next(iter(client.iter_runs(job.id, states=(RunState.RUNNING,))), None),
            what="the run RUNNING",
        )
        seen = bytearray()
        halfway = threading.Event()
        for chunk in client.read_output(run.id, follow=True):
            seen += chunk.data
            if b"half\n" in seen and not halfway.is_set():
                halfway.set()
                assert client.get_run(run.id).state == RunState.RUNNING  # seen live
                flag.touch()
            if chunk.eof:
                break
    assert bytes(seen) == seq_bytes(100000) + b"half\nend\n"


def test_http_json_chunks_carry_their_offsets(dev: DevServer, client: Client) -> None:
    job = client.create_job(sh("printf abc; printf def >&2"))
    [run] = client.wait_job_runs(job.id, count=1, timeout=30)
    url = f"{dev.http_url}/v1/runs/{run.id}/output?offset=1&limit=4"
    req = urllib.request.Request(url, headers={"X-Shardcron-Owner": client.owner})
    with urllib.request.urlopen(req, timeout=30) as resp:
        chunks = json.load(resp)["chunks"]
    assert int(chunks[0].get("offset", 0)) == 1
    got = b"".join(base64.b64decode(c["data"]) for c in chunks)
    # the two pipes are read as they come: either stream may be first
    assert got in (b"bcde", b"efab")
    assert {c["stream"] for c in chunks} <= {"stdout", "stderr"}
