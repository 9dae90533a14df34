"""The blob store down while a run writes output, end to end: ``shardcron dev`` keeping
runs' output in a real S3-compatible service (a Versity S3 gateway of the test's own),
SIGKILLed mid-run and started again on the same directory and port. The node pauses
the run's output and its worker keeps it on disk meanwhile; nothing is lost up to the
spool's bound, the run's record has the sha256 of its whole output, and what
``run logs`` prints matches it. Past the bound, the output is cut and the run says
for how long the store was unavailable.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import VersityGateway
from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, Run, RunState
from tests.e2e.harness import DevServer
from tests.support.blob_stores import BUCKET
from tests.support.waiting import wait_until

BLOCKS = 240  # of 64 KiB each: 15 MiB, written over about 25 s
BLOCK = 64 << 10
DOWN_FOR = 10.0  # seconds the gateway stays killed


def writer(blocks: int, pause: float) -> JobSpec:
    """A command writing ``blocks`` numbered 64 KiB blocks, ``pause`` seconds apart."""
    script = (
        f"i=0; while [ $i -lt {blocks} ]; do printf '%07d' $i;"
        f" head -c {BLOCK - 8} /dev/zero | tr '\\0' '.'; echo; i=$((i+1)); sleep {pause}; done"
    )
    return JobSpec(name="down", task=CommandTask(argv=("sh", "-c", script)))


def written(blocks: int) -> bytes:
    return b"".join(f"{i:07d}".encode() + b"." * (BLOCK - 8) + b"\n" for i in range(blocks))


NOTICE = b"\n[shardcron: output truncated"


def kept_in_place(c: Client, run_id: str, expected: bytes) -> int:
    """How many bytes of the run's output read before its first cut notice, each
    checked to be ``expected``'s at its offset, the offsets rising."""
    kept, last = 0, -1
    for chunk in c.read_output(run_id):
        data = chunk.data
        cut = data.find(NOTICE)
        if cut >= 0:
            data = data[:cut]
        assert chunk.offset > last, f"chunk at {chunk.offset} after one at {last}"
        assert data == expected[chunk.offset : chunk.offset + len(data)], chunk.offset
        kept, last = kept + len(data), chunk.offset
        if cut >= 0:
            break
    return kept


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[VersityGateway]:
    """A gateway of this test alone: it is killed and started again."""
    gw = VersityGateway(tmp_path / "gw").start(buckets=[BUCKET])
    try:
        yield gw
    finally:
        gw.stop(grace=0)


def dev_on(gateway: VersityGateway, data: Path, *extra: str) -> DevServer:
    return DevServer(
        data,
        extra=[
            "--workers", "1",
            "--blob-store", f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}",
            "--blob-endpoint", gateway.endpoint,
            "--blob-region", "us-east-1",
            "--blob-access-key-file", str(gateway.access_key_file),
            "--blob-secret-key-file", str(gateway.secret_key_file),
            *extra,
        ],
    ).start()  # fmt: skip


def read_all(c: Client, run_id: str) -> bytes:
    return b"".join(chunk.data for chunk in c.read_output(run_id))


def kill_mid_run(c: Client, gateway: VersityGateway, job_id: str) -> Run:
    """Waits until the job's run has written output for a while, then SIGKILLs the gateway for
    ``DOWN_FOR`` seconds and starts it again on the same directory and port."""
    run = wait_until(
        lambda: next((r for r in c.list_runs(job_id).items if r.state == RunState.RUNNING), None),
        timeout=60,
        what="the run running",
    )
    time.sleep(3)  # about 30 blocks written, some of them in the store
    port = gateway.port
    gateway.stop(grace=0)  # SIGKILL
    time.sleep(DOWN_FOR)
    now = c.get_run(run.id)
    assert now.state == RunState.RUNNING, now  # it wrote on while the store was down
    gateway.start(buckets=[BUCKET])
    assert gateway.port == port
    return run


def test_the_blob_store_killed_mid_run_and_restarted_loses_no_output(
    gateway: VersityGateway, tmp_path: Path
) -> None:
    server = dev_on(gateway, tmp_path / "data")
    try:
        with server.client() as c:
            job = c.create_job(writer(BLOCKS, 0.1))
            kill_mid_run(c, gateway, job.id)
            [run] = c.wait_job_runs(job.id, count=1, timeout=240)
            assert run.state == RunState.SUCCEEDED, run
            expected = written(BLOCKS)
            assert run.output_truncated == ""
            assert run.output_bytes == len(expected)
            assert run.output_sha256 == hashlib.sha256(expected).hexdigest()
            got = read_all(c, run.id)
            assert hashlib.sha256(got).hexdigest() == run.output_sha256
            logs = server.cli("run", "logs", run.id, owner=c.owner).stdout.encode()
            assert hashlib.sha256(logs).hexdigest() == run.output_sha256
            shown = server.cli("run", "get", run.id, owner=c.owner).stdout
            assert run.output_sha256 in shown
            url = f"{server.http_url}/v1/runs/{run.id}"
            req = urllib.request.Request(url, headers={"X-Shardcron-Owner": c.owner})
            with urllib.request.urlopen(req, timeout=10) as answer:
                assert json.load(answer)["outputSha256"] == run.output_sha256
        log = server.proc.output() if server.proc else ""
        assert "paused by its node" in log and "resumed by its node" in log
    finally:
        server.stop()


def test_output_past_the_spool_bound_is_cut_and_the_run_says_for_how_long(
    gateway: VersityGateway, tmp_path: Path
) -> None:
    bound = 4 * BLOCK
    server = dev_on(gateway, tmp_path / "data", "--output-spool-bytes", str(bound))
    try:
        with server.client() as c:
            job = c.create_job(writer(BLOCKS, 0.1))
            kill_mid_run(c, gateway, job.id)
            [run] = c.wait_job_runs(job.id, count=1, timeout=240)
            assert run.state == RunState.SUCCEEDED, run
            assert run.output_truncated.startswith("blob store unavailable for ")
            seconds = int(run.output_truncated.split()[4])
            assert DOWN_FOR / 2 <= seconds <= 60  # paused once a write failed, until back
            got = read_all(c, run.id)
            expected = written(BLOCKS)
            kept = got[: got.find(b"\n[shardcron: output truncated")]
            assert 4 * BLOCK <= len(kept) < len(expected)
            assert expected.startswith(kept)  # cut, never holed or out of order
            assert b"output truncated: blob store unavailable for" in got
    finally:
        server.stop()


def test_a_run_ending_while_the_store_is_down_ends_on_time_its_output_cut_and_said(
    gateway: VersityGateway, tmp_path: Path
) -> None:
    """The store stays down past the run's end: its result waits for its spool at most
    ``--output-drain-wait``, then goes with the rest cut and said; the run succeeds, and
    other runs go on meanwhile."""
    server = dev_on(gateway, tmp_path / "data", "--output-drain-wait", "2s")
    try:
        with server.client() as c:
            job = c.create_job(writer(200, 0.05))
            run = wait_until(
                lambda: next(
                    (r for r in c.list_runs(job.id).items if r.state == RunState.RUNNING), None
                ),
                timeout=60,
                what="the run running",
            )
            time.sleep(1)
            gateway.stop(grace=0)  # SIGKILL, and not started again until the run ends
            [run] = c.wait_job_runs(job.id, count=1, timeout=120)
            assert run.state == RunState.SUCCEEDED, run
            assert "blob store unavailable for " in run.output_truncated
            other = c.create_job(JobSpec(name="meanwhile", task=CommandTask(argv=("true",))))
            [after] = c.wait_job_runs(other.id, count=1, timeout=60)
            assert after.state == RunState.SUCCEEDED  # the poller never waited on the store
            gateway.start(buckets=[BUCKET])
            got = read_all(c, run.id)
            assert b"[shardcron: output truncated: blob store unavailable for " in got
            assert b" s (on its worker)]" in got  # its spool did not drain in the wait
            # what the parts and the job store's tail kept of it: each byte at its own
            # offset, in order; the bytes the node held when the run ended were cut (a
            # gap in the offsets, once parts were written before the store went down)
            assert kept_in_place(c, run.id, written(200)) > 0
    finally:
        server.stop()
