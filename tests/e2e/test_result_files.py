"""A run's result files through ``shardcron dev`` (its blob store a directory under its
data dir): what a command leaves in ``$SHARDCRON_RESULT_DIR`` listed on the run and read
back through the SDK, the CLI and HTTP; what it may not leave said on the run; other
owners refused. One dev server
for the module (the harness's ``dev``), each test with an owner of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.client.errors import InvalidArgument, NotFound
from shardcron.client.sdk import AsyncClient, Client
from shardcron.client.types import CommandTask, JobSpec, Resources, ResultLimits, Run, RunState
from tests.e2e.harness import DevServer

BIG = 3 << 20  # bytes of big.bin: many pieces, more than one blob store chunk


def sh(script: str) -> JobSpec:
    return JobSpec(name="results", task=CommandTask(argv=("sh", "-c", script)))


def big_bytes() -> bytes:
    return b"".join(b"%d\n" % i for i in range(1, 500_000))[:BIG]


def run_of(c: Client, script: str, resources: Resources | None = None) -> Run:
    spec = sh(script)
    if resources is not None:
        spec = dataclasses.replace(spec, resources=resources)
    job = c.create_job(spec)
    [run] = c.wait_job_runs(job.id, count=1, timeout=60)
    return run


@pytest.fixture(scope="module")
def made(dev: DevServer) -> Iterator[tuple[Client, Run]]:
    """A run that left two files, a link and a folder in its result dir."""
    c = dev.client()
    run = run_of(
        c,
        'cd "$SHARDCRON_RESULT_DIR" && printf \'{"ok": true}\' > report.json'
        f" && seq 1 499999 | head -c {BIG} > big.bin && ln -s /etc/passwd passwd"
        " && mkdir sub",
    )
    assert run.state == RunState.SUCCEEDED, run.error
    yield c, run
    c.close()


def test_the_run_lists_its_files_and_says_what_was_left_out(made: tuple[Client, Run]) -> None:
    c, run = made
    got = c.get_run(run.id)
    sizes = {f.name: (f.size, f.sha256) for f in got.results}
    assert sizes == {
        "big.bin": (BIG, hashlib.sha256(big_bytes()).hexdigest()),
        "report.json": (12, hashlib.sha256(b'{"ok": true}').hexdigest()),
    }
    assert "passwd: left out: a symbolic link" in got.results_note
    assert "sub: left out: a directory" in got.results_note


def test_files_read_back_whole_and_by_range(dev: DevServer, made: tuple[Client, Run]) -> None:
    c, run = made
    assert b"".join(c.read_result(run.id, "report.json")) == b'{"ok": true}'
    assert hashlib.sha256(b"".join(c.read_result(run.id, "big.bin"))).hexdigest() == (
        hashlib.sha256(big_bytes()).hexdigest()
    )
    assert b"".join(c.read_result(run.id, "big.bin", offset=2, limit=5)) == big_bytes()[2:7]


def test_cli_lists_and_gets_a_file(
    dev: DevServer, made: tuple[Client, Run], tmp_path: Path
) -> None:
    c, run = made
    listed = dev.cli("run", "results", run.id, owner=c.owner)
    assert "report.json" in listed.stdout and "big.bin" in listed.stdout
    assert "passwd: left out" in listed.stderr
    as_json = json.loads(dev.cli("--json", "run", "results", run.id, owner=c.owner).stdout)
    assert {f["name"] for f in as_json["results"]} == {"big.bin", "report.json"}
    out = tmp_path / "big.bin"
    dev.cli("run", "results", run.id, "--get", "big.bin", "-o", str(out), owner=c.owner)
    assert out.read_bytes() == big_bytes()
    missing = dev.cli("run", "results", run.id, "--get", "nope", owner=c.owner, check=False)
    assert missing.returncode != 0 and "no result file 'nope'" in missing.stderr


def test_http_serves_a_file_as_a_download(dev: DevServer, made: tuple[Client, Run]) -> None:
    c, run = made
    url = f"{dev.http_url}/v1/runs/{run.id}/results/report.json?offset=1&limit=4"
    req = urllib.request.Request(url, headers={"X-Shardcron-Owner": c.owner})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.read() == b'"ok"'
        assert resp.headers["Content-Disposition"] == 'attachment; filename="report.json"'
    got = urllib.request.urlopen(
        urllib.request.Request(
            f"{dev.http_url}/v1/runs/{run.id}", headers={"X-Shardcron-Owner": c.owner}
        ),
        timeout=30,
    )
    listed = json.load(got)["results"]
    assert {f["name"] for f in listed} == {"big.bin", "report.json"}


def test_other_owners_cannot_read_them(dev: DevServer, made: tuple[Client, Run]) -> None:
    _, run = made
    with dev.client() as other, pytest.raises(NotFound):
        list(other.read_result(run.id, "report.json"))
    url = f"{dev.http_url}/v1/runs/{run.id}/results/report.json"
    req = urllib.request.Request(url, headers={"X-Shardcron-Owner": "someone-else"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 404


@pytest.mark.parametrize(
    ("name", "ask", "field"),
    [("../x", {}, "name"), ("report.json", {"offset": -1}, "offset"),
     ("report.json", {"limit": -1}, "limit"), ("report.json", {"offset": 13}, "offset")],
    ids=str,
)  # fmt: skip
def test_bad_requests_are_refused_naming_the_field(
    made: tuple[Client, Run], name: str, ask: dict[str, int], field: str
) -> None:
    c, run = made
    with pytest.raises(InvalidArgument) as e:
        list(c.read_result(run.id, name, **ask))
    assert e.value.field == field


def test_a_name_the_run_does_not_list_is_not_found(made: tuple[Client, Run]) -> None:
    c, run = made
    with pytest.raises(NotFound):
        list(c.read_result(run.id, "passwd"))


def test_bounds_leave_files_out_and_say_so(client: Client) -> None:
    run = run_of(client, 'cd "$SHARDCRON_RESULT_DIR" && for i in $(seq 1 103); do : > f$i; done')
    assert run.state == RunState.SUCCEEDED, run.error
    assert len(run.results) == 100
    assert "3 files left out: a run keeps 100" in run.results_note


def test_a_jobs_own_bounds_leave_files_out_and_say_so(client: Client) -> None:
    limits = ResultLimits(max_files=2, max_file_bytes=10, max_bytes=15)
    run = run_of(
        client,
        'cd "$SHARDCRON_RESULT_DIR" && printf 12345678 > a && printf 12345678901 > b'
        " && printf 12345678 > c && printf 12 > d && printf 1 > e",
        Resources(results=limits),
    )
    assert run.state == RunState.SUCCEEDED, run.error
    assert [f.name for f in run.results] == ["a", "d"]
    note = run.results_note
    assert "b: left out: 11 bytes, past the 10 a result file may hold" in note
    assert "c: left out: past the bytes a run's result files may hold together" in note
    assert "1 file left out: a run keeps 2" in note


async def test_the_async_client_reads_them_too(dev: DevServer, made: tuple[Client, Run]) -> None:
    c, run = made
    async with AsyncClient(dev.target, owner=c.owner, timeout=15) as ac:
        got = b"".join([d async for d in ac.read_result(run.id, "big.bin", offset=10, limit=20)])
        assert got == big_bytes()[10:30]
        with pytest.raises(NotFound):
            [d async for d in ac.read_result(run.id, "nope")]
