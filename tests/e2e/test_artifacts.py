"""Code shipped with a job, with real processes: a ``shardcron dev`` without in-process
workers, and a ``shardcron worker`` with an empty cache of its own, whose commands run
as a user of their own per owner.

The archive is uploaded once per owner and digest; the worker, which never saw it,
fetches it through the node holding the run's lease, checks its digest, caches it and
unpacks it into the run's directory, where the command runs as the run's user. A
cached copy changed on disk is not unpacked: it is fetched again. An unsafe archive
is refused at upload naming its entry, and stores nothing; another owner cannot name
the archive in a job.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from deploy import VersityGateway
from shardcron.blobs.layout import artifact_key
from shardcron.blobs.s3 import S3BlobStore
from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import clip
from shardcron.client.sdk import Client
from shardcron.client.types import CommandTask, JobSpec, RunReason, RunState, Schedule
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.e2e.harness import DevServer, Proc, channel_to
from tests.support.blob_stores import BUCKET, gateway_options
from tests.support.containment import shared_dir

RUN_AS = "230000-230999"
MAX_ENTRIES = 50  # the node's --artifact-max-entries


def tar_of(files: dict[str, bytes], *, gz: bool = True, extra: list[tarfile.TarInfo] = ()) -> bytes:
    """A tar (gzip-compressed with ``gz``) of ``files`` (name -> bytes, mode 0755), then
    the bare entries ``extra``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return buf.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevServer, Path]]:
    base = tmp_path_factory.mktemp("artifacts")
    extra = ["--workers", "0", "--lease-ttl", "3s", "--artifact-max-entries", str(MAX_ENTRIES)]
    dev = DevServer(base / "data", extra=extra).start()
    with shared_dir() as shared:
        run_dir = shared / "runs"
        cache = base / "worker-cache"
        args = ["worker", "--target", dev.target, "--run-dir", str(run_dir)]
        args += ["--artifact-cache", str(cache)]
        if os.geteuid() == 0:
            args += ["--run-as-range", RUN_AS]
        worker = Proc([*args, "--log-level", "debug"], base / "worker.log").start()
        try:
            yield dev, cache
        finally:
            worker.stop()
            dev.stop()


def _run(client: Client, task: CommandTask) -> tuple[RunState, str, str]:
    job = client.create_job(JobSpec(name="code", schedule=Schedule.immediate(), task=task))
    run = client.wait_run(client.list_runs(job.id).items[0].id, timeout=60)
    text = b"".join(c.data for c in client.read_output(run.id)).decode()
    return run.state, text, run.error


SCRIPT = b"#!/bin/sh\nset -e\necho cwd=$(pwd)\necho user=$(id -u)\ncat lib/data.txt\n"


def test_an_artifact_job_runs_on_a_worker_that_never_saw_it(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, cache = cluster
    client = dev.client()
    archive = tar_of({"run.sh": SCRIPT, "lib/data.txt": b"shipped " + os.urandom(4).hex().encode()})
    digest = client.upload_artifact(archive)
    assert digest == hashlib.sha256(archive).hexdigest()
    assert not (cache / digest).exists()  # the worker never saw it
    state, text, error = _run(client, CommandTask(argv=("./run.sh",), artifact=digest))
    assert state == RunState.SUCCEEDED, (text, error)
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert lines["cwd"].endswith("/work")
    if os.geteuid() == 0:  # unpacked and run as the run's own user, not the worker's
        assert 230000 <= int(lines["user"]) <= 230999
    assert "shipped " in text
    assert (cache / digest).read_bytes() == archive  # cached, as fetched


def test_a_tampered_cached_archive_is_fetched_again(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, cache = cluster
    client = dev.client()
    archive = tar_of({"run.sh": b"#!/bin/sh\necho genuine\n"})
    digest = client.upload_artifact(archive)
    task = CommandTask(argv=("./run.sh",), artifact=digest)
    assert _run(client, task)[:2] == (RunState.SUCCEEDED, "genuine\n")
    evil = tar_of({"run.sh": b"#!/bin/sh\necho tampered\n"})
    (cache / digest).write_bytes(evil)  # the same name, other bytes
    state, text, error = _run(client, task)
    assert (state, text) == (RunState.SUCCEEDED, "genuine\n"), error
    assert (cache / digest).read_bytes() == archive


def test_the_same_archive_is_stored_once_per_owner(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    archive = tar_of({"a.txt": b"a"})
    with channel_to(dev.target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)

        def upload(owner: str) -> jobs_pb2.UploadArtifactResponse:
            requests = iter(
                [
                    jobs_pb2.UploadArtifactRequest(size=len(archive)),
                    jobs_pb2.UploadArtifactRequest(data=archive),
                ]
            )
            return stub.UploadArtifact(
                requests, metadata=[("x-shardcron-owner", owner)], timeout=15
            )

        first, again, other = upload("ann"), upload("ann"), upload("bob")
    assert (first.stored, again.stored, other.stored) == (True, False, True)
    assert first.sha256 == again.sha256 == other.sha256 == hashlib.sha256(archive).hexdigest()


def test_another_owner_cannot_name_the_archive(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    digest = dev.client("alice").upload_artifact(tar_of({"run.sh": b"#!/bin/sh\necho alice\n"}))
    mallory = dev.client("mallory")
    spec = JobSpec(
        name="steal",
        schedule=Schedule.immediate(),
        task=CommandTask(argv=("./run.sh",), artifact=digest),
    )
    with pytest.raises(InvalidArgument) as refused:
        mallory.create_job(spec)
    assert refused.value.field == "spec.task.command.artifact"
    assert mallory.list_jobs().items == []
    # nor can a worker of hers read it through a lease it does not hold
    from shardcron.v1 import worker_pb2, worker_pb2_grpc

    with channel_to(dev.target) as channel:
        call = worker_pb2_grpc.WorkerServiceStub(channel).ReadArtifact(
            worker_pb2.ReadArtifactRequest(
                run_id="r", fencing_token=1, sha256=digest, worker_id="w"
            ),
            timeout=15,
        )
        with pytest.raises(grpc.RpcError) as denied:
            list(call)
    assert denied.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([entry("/etc/evil")], "/etc/evil"),
        ([entry("lib/../../evil")], "lib/../../evil"),
        ([entry("up", tarfile.SYMTYPE, "../../etc/passwd")], "up"),
        ([entry("hard", tarfile.LNKTYPE, "/etc/passwd")], "hard"),
        ([entry("dev", tarfile.CHRTYPE)], "dev"),
        (
            [
                entry("a/b/c", tarfile.DIRTYPE),
                entry("a/b/c/s", tarfile.SYMTYPE, "."),
                entry("esc", tarfile.SYMTYPE, "a/b/c/s/../../../.."),
            ],
            "esc",
        ),
        ([entry("ok.txt", tarfile.SYMTYPE, ".")], "ok.txt"),
        ([entry("d" * 10_000)], clip("d" * 10_000)),
    ],
    ids=[
        "absolute",
        "dotdot",
        "symlink-out",
        "hardlink-out",
        "device",
        "link-chain-out",
        "symlink-replaces-file",
        "path-past-path-max",
    ],  # fmt: skip
)
def test_an_unsafe_archive_is_refused_naming_the_entry(cluster, extra, named) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    owner = f"u-{time.monotonic_ns()}"
    client = dev.client(owner)
    archive = tar_of({"ok.txt": b"fine"}, extra=extra)
    with pytest.raises(InvalidArgument) as refused:
        client.upload_artifact(archive)
    assert refused.value.field == "artifact"
    assert repr(named) in refused.value.reason
    # nothing was stored: a job naming it is refused
    with pytest.raises(InvalidArgument, match="upload it first"):
        client.create_job(
            JobSpec(
                name="x",
                schedule=Schedule.immediate(),
                task=CommandTask(argv=("true",), artifact=hashlib.sha256(archive).hexdigest()),
            )
        )
    assert not (
        dev.data_dir / "blobs" / artifact_key(owner, hashlib.sha256(archive).hexdigest())
    ).exists()


def test_the_nodes_bound_on_entries_holds(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    client = dev.client()
    files = {f"f{i:03d}": b"" for i in range(MAX_ENTRIES + 1)}
    with pytest.raises(InvalidArgument) as refused:
        client.upload_artifact(tar_of(files))
    assert f"'f{MAX_ENTRIES:03d}': more than {MAX_ENTRIES} entries" in refused.value.reason
    files.popitem()
    assert client.upload_artifact(tar_of(files))


def test_a_run_whose_artifact_is_gone_fails_clearly(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    owner = f"gone-{time.monotonic_ns()}"
    client = dev.client(owner)
    digest = client.upload_artifact(tar_of({"run.sh": SCRIPT, "pad": os.urandom(64)}))
    spec = JobSpec(
        name="gone",
        schedule=Schedule.every(timedelta(hours=1)),
        task=CommandTask(argv=("./run.sh",), artifact=digest),
    )
    job = client.create_job(spec)
    (dev.data_dir / "blobs" / artifact_key(owner, digest)).unlink()  # as a sweep would
    run = client.wait_run(client.run_job_now(job.id).id, timeout=60)
    assert (run.state, run.reason) == (RunState.FAILED, RunReason.SPAWN_FAILED)
    assert digest in run.error and "NOT_FOUND" in run.error


def _post(dev: DevServer, body: bytes, content_type: str, query: str = "") -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{dev.http_url}/v1/artifacts{query}",
        data=body,
        method="POST",
        headers={"Content-Type": content_type, "x-shardcron-owner": "web"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_http_edge_takes_an_archive_as_bytes_and_nothing_else(cluster) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    archive = tar_of({"run.sh": b"#!/bin/sh\necho web\n"})
    digest = hashlib.sha256(archive).hexdigest()
    assert _post(dev, archive, "application/octet-stream", f"?sha256={digest}") == (
        201,
        {"sha256": digest, "size": str(len(archive)), "stored": True},
    )
    status, answer = _post(dev, archive, "application/octet-stream")
    assert (status, answer.get("stored", False)) == (200, False)  # JSON leaves out a false
    for other in ("application/json", "text/plain", "application/x-www-form-urlencoded"):
        status, answer = _post(dev, archive, other)
        assert (status, answer["field"]) == (415, "content-type"), other
    status, answer = _post(dev, tar_of({}, extra=[entry("../x")]), "application/octet-stream")
    assert (status, answer["field"]) == (400, "artifact")
    assert "'../x'" in answer["message"]
    status, answer = _post(dev, archive, "application/octet-stream", "?sha256=" + "0" * 64)
    assert (status, answer["field"]) == (400, "sha256")


async def test_an_artifact_kept_in_s3_runs_on_a_fresh_worker(
    s3_gateway: VersityGateway, tmp_path: Path
) -> None:
    """Over the S3 gateway: an archive past one part (a multipart upload) is stored by
    the node and fetched back through it by its in-process worker."""
    prefix = f"t-{time.monotonic_ns()}"
    server = DevServer(
        tmp_path / "data",
        extra=[
            "--workers", "1",
            "--blob-store", f"s3://{BUCKET}/{prefix}",
            "--blob-endpoint", s3_gateway.endpoint,
            "--blob-region", "us-east-1",
            "--blob-access-key-file", str(s3_gateway.access_key_file),
            "--blob-secret-key-file", str(s3_gateway.secret_key_file),
        ],
    ).start()  # fmt: skip
    payload = os.urandom(9 << 20)  # incompressible: the archive passes one 8 MiB part
    archive = tar_of({"run.sh": b"#!/bin/sh\nsha256sum payload\n", "payload": payload})
    try:
        with server.client() as client:
            digest = client.upload_artifact(archive)
            state, text, error = _run(client, CommandTask(argv=("./run.sh",), artifact=digest))
            owner = client.owner
        metrics = server.metrics()
    finally:
        server.stop()
    assert 'shardcron_worker_artifacts_total{outcome="fetched"} 1.0' in metrics
    assert state == RunState.SUCCEEDED, error
    assert text.split()[0] == hashlib.sha256(payload).hexdigest()
    store = S3BlobStore(BUCKET, prefix, gateway_options(s3_gateway))
    await store.open()
    try:
        info = await store.head(artifact_key(owner, digest))
        assert (info.size, info.sha256) == (len(archive), digest)
    finally:
        await store.close()


def test_the_cli_ships_a_file_with_job_create_and_update(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dev, _ = cluster
    owner = f"cli-{time.monotonic_ns()}"
    first, second = tmp_path / "v1.tar.gz", tmp_path / "v2.tar"
    first.write_bytes(tar_of({"run.sh": b"#!/bin/sh\necho version one\n"}))
    second.write_bytes(tar_of({"run.sh": b"#!/bin/sh\necho version two\n"}, gz=False))
    created = dev.cli(
        "--json", "job", "create", "shipped", "--every", "1h", "--artifact", str(first),
        "--", "./run.sh", owner=owner,
    )  # fmt: skip
    job = json.loads(created.stdout)
    assert job["spec"]["task"]["artifact"] == hashlib.sha256(first.read_bytes()).hexdigest()
    dev.cli("job", "update", job["id"], "--artifact", str(second), owner=owner)
    client = dev.client(owner)
    updated = client.get_job(job["id"]).spec.task
    assert isinstance(updated, CommandTask)
    assert updated.artifact == hashlib.sha256(second.read_bytes()).hexdigest()
    run = client.wait_run(client.run_job_now(job["id"]).id, timeout=60)
    assert b"".join(c.data for c in client.read_output(run.id)) == b"version two\n"
    # the node recorded that the job refers to each archive it named (the sweep of
    # artifacts no job refers to drops the first one's, once the grace has passed)
    with contextlib.closing(
        sqlite3.connect(f"file:{dev.data_dir}/shardcron.db?mode=ro", uri=True)
    ) as db:
        refs = db.execute("SELECT sha256 FROM artifact_refs WHERE job_id = ?", (job["id"],))
        assert sorted(r[0] for r in refs) == sorted(
            hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, second)
        )
