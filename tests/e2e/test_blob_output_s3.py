"""``shardcron dev`` keeping runs' output and result files in S3 (the session's
S3-compatible service), reached through its ``--blob-*`` flags with the keys in files,
end to end."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from deploy import VersityGateway
from shardcron.blobs.layout import output_prefix, result_key
from shardcron.blobs.s3 import S3BlobStore
from shardcron.client.types import CommandTask, JobSpec, RunState
from tests.e2e.harness import DevServer
from tests.support.blob_stores import BUCKET, gateway_options

LINES = 2_000_000  # `seq 1 LINES`: 14 MiB, several parts
RESULT_LINES = 1_000_000  # of its result file: 6.9 MiB, a multipart upload


async def test_dev_keeps_a_runs_whole_output_in_s3(
    s3_gateway: VersityGateway, tmp_path: Path
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:12]}"
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
    try:
        with server.client() as c:
            script = f'seq 1 {LINES}; seq 1 {RESULT_LINES} > "$SHARDCRON_RESULT_DIR/nums.txt"'
            job = c.create_job(JobSpec(name="s3", task=CommandTask(argv=("sh", "-c", script))))
            [run] = c.wait_job_runs(job.id, count=1, timeout=120)
            assert run.state == RunState.SUCCEEDED
            expected = b"".join(b"%d\n" % i for i in range(1, LINES + 1))
            got = b"".join(chunk.data for chunk in c.read_output(run.id))
            assert hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest()
            tail = b"".join(chunk.data for chunk in c.read_output(run.id, offset=-8))
            assert tail == expected[-8:]
            nums = b"".join(b"%d\n" % i for i in range(1, RESULT_LINES + 1))
            [listed] = run.results
            assert (listed.name, listed.size) == ("nums.txt", len(nums))
            assert b"".join(c.read_result(run.id, "nums.txt")) == nums
            owner = c.owner
    finally:
        server.stop()
    assert not (tmp_path / "data" / "blobs").exists()  # nothing went to the data dir
    store = S3BlobStore(BUCKET, prefix, gateway_options(s3_gateway))
    await store.open()
    try:
        page = await store.list(output_prefix(owner, run.id, run.lease_token))
        assert sum(entry.size for entry in page.items) == len(expected)
        assert len(page.items) >= 2  # parts: cut by size and by the flush clock
        assert await store.get(result_key(owner, run.id, "nums.txt")) == nums
    finally:
        await store.close()
