"""Issue 10, items 4 and 6, on a real ``shardcron dev``: output floods and answers
that do not fit a client keeping gRPC's default 4 MiB receive limit.

The node has no in-process worker: the tests speak the worker stream themselves
(a raw ``WorkerService.Connect``), as a worker in any language or a hostile one would.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest

from shardcron.coordinator.service import JOB_REPLY_OVERHEAD, MAX_MESSAGE_BYTES
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2, worker_pb2, worker_pb2_grpc
from tests.e2e.harness import DevServer

MiB = 1 << 20
OWNER = (("x-shardcron-owner", "limits"),)
# A client that can send anything but receives what a default client receives.
BIG_SENDER = [("grpc.max_send_message_length", 256 * MiB)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("limits") / "data", extra=["--workers", "0"])
    server.start()
    yield server
    server.stop()


@pytest.fixture
def channel(node: DevServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(node.target, options=BIG_SENDER) as ch:
        yield ch


def handler_spec(
    name: str, handler: str, payload: bytes = b"", cron: str = ""
) -> types_pb2.JobSpec:
    schedule = (
        types_pb2.Schedule(kind=types_pb2.SCHEDULE_KIND_CRON, cron=cron)
        if cron
        else types_pb2.Schedule(kind=types_pb2.SCHEDULE_KIND_IMMEDIATE)
    )
    task = types_pb2.Task(handler=types_pb2.HandlerTask(name=handler, payload=payload))
    return types_pb2.JobSpec(name=name, task=task, schedule=schedule)


class RawWorker:
    """One worker stream spoken by hand: a Hello, then whatever the test sends."""

    def __init__(self, channel: grpc.Channel, handler: str, worker_id: str) -> None:
        self._out: queue.Queue[worker_pb2.WorkerMessage | None] = queue.Queue()
        hello = worker_pb2.Hello(worker_id=worker_id, slots=1, handlers=[handler])
        self._out.put(worker_pb2.WorkerMessage(hello=hello))
        self.call = worker_pb2_grpc.WorkerServiceStub(channel).Connect(
            iter(self._out.get, None), metadata=OWNER
        )
        self.leases: queue.Queue[worker_pb2.Lease] = queue.Queue()
        self.error: grpc.RpcError | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for msg in self.call:
                for lease in msg.leases.leases if msg.WhichOneof("body") == "leases" else ():
                    self.leases.put(lease)
        except grpc.RpcError as e:
            self.error = e

    def output(self, lease: worker_pb2.Lease, data: bytes) -> None:
        chunk = types_pb2.OutputChunk(
            run_id=lease.run_id, fencing_token=lease.fencing_token, stream="stdout", data=data
        )
        self._out.put(worker_pb2.WorkerMessage(output=worker_pb2.Output(chunks=[chunk])))

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()


def read_output(channel: grpc.Channel, run_id: str) -> tuple[int, bytes]:
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    chunks = list(jobs.ReadRunOutput(jobs_pb2.ReadRunOutputRequest(run_id=run_id), metadata=OWNER))
    return (chunks[0].offset if chunks else -1), b"".join(c.data for c in chunks)


def stored_bytes(node: DevServer) -> int:
    return sum(p.stat().st_size for p in node.data_dir.iterdir() if ".db" in p.name)


def test_a_huge_output_message_ends_only_its_stream(node: DevServer, channel: grpc.Channel) -> None:
    """60 MiB output messages grew the node by 790 MB and the file and WAL by 847 MiB;
    now such a message ends its own stream with RESOURCE_EXHAUSTED and nothing else."""
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    before = stored_bytes(node)
    flood = RawWorker(channel, "limits.flood", "flooder")
    jobs.CreateJob(
        jobs_pb2.CreateJobRequest(spec=handler_spec("f", "limits.flood")), metadata=OWNER
    )
    lease = flood.leases.get(timeout=15)
    flood.output(lease, b"y" * (60 * MiB))
    flood.call.code()  # waits for the stream's end
    assert flood.call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Another stream is served: it takes a lease and its output is kept.
    other = RawWorker(channel, "limits.other", "other")
    spec = handler_spec("o", "limits.other")
    jobs.CreateJob(jobs_pb2.CreateJobRequest(spec=spec), metadata=OWNER)
    other_lease = other.leases.get(timeout=15)
    # Output well over the job store's cap in messages under the limit: kept whole in
    # dev's blob store, the job store keeping its tail.
    line = b"z" * 99 + b"\n"
    message = line * ((MAX_MESSAGE_BYTES - 64 * 1024) // 100)
    for _ in range(6):
        other.output(other_lease, message)
    other.output(other_lease, b"last line\n")
    for _ in range(100):
        offset, kept = read_output(channel, other_lease.run_id)
        if kept.endswith(b"last line\n"):
            break
        threading.Event().wait(0.1)
    offset, kept = read_output(channel, other_lease.run_id)  # all appends done: one view
    assert kept.endswith(b"z\nlast line\n") and kept.startswith(b"z")  # whole lines
    assert len(kept) == 6 * len(message) + len(b"last line\n")
    assert other.error is None and not other.call.done()
    other.close()
    assert stored_bytes(node) - before < 64 * MiB  # nothing near the 60 MiB sent was kept


def test_a_page_of_large_jobs_fits_a_default_client(channel: grpc.Channel) -> None:
    """After 60 jobs with 1 MiB payloads a default client could no longer list them."""
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    owner = (("x-shardcron-owner", "pages"),)
    payload = b"p" * MiB
    created = [
        jobs.CreateJob(
            jobs_pb2.CreateJobRequest(spec=handler_spec(f"big{i}", "nobody", payload, "0 0 1 1 *")),
            metadata=owner,
        ).job.id
        for i in range(12)
    ]
    seen, token, pages = [], "", 0
    while True:  # default page size (100) and a default client's receive limit
        page = jobs.ListJobs(jobs_pb2.ListJobsRequest(page_token=token), metadata=owner)
        assert page.jobs, "a page is never empty while more jobs exist"
        seen += [j.id for j in page.jobs]
        pages, token = pages + 1, page.next_page_token
        if not token:
            break
    assert seen == created and pages >= 4


def test_a_batch_create_never_acknowledges_less_than_it_wrote(channel: grpc.Channel) -> None:
    """CreateJobs of five 1 MiB jobs wrote them all, then failed RESOURCE_EXHAUSTED at
    the client (a 5 MiB reply). Now a batch whose reply cannot fit is refused, naming
    ``jobs``, before anything is written; one that fits is acknowledged whole."""
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    owner = (("x-shardcron-owner", "batch"),)
    specs = [handler_spec(f"b{i}", "nobody", b"q" * MiB, "0 0 1 1 *") for i in range(5)]
    items = [jobs_pb2.CreateJobRequest(spec=s) for s in specs]
    # Over the node's message limit: refused on arrival. Under it, but with a reply
    # over the page budget: refused by the api, naming the field.
    for count, code in (
        (5, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (3, grpc.StatusCode.INVALID_ARGUMENT),
    ):
        request = jobs_pb2.CreateJobsRequest(jobs=items[:count])
        with pytest.raises(grpc.RpcError) as refused:
            jobs.CreateJobs(request, metadata=owner)
        assert refused.value.code() == code
        assert not jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=owner).jobs
    assert (refused.value.details() or "").startswith("jobs")
    two = jobs_pb2.CreateJobsRequest(jobs=items[:2])
    assert len(jobs.CreateJobs(two, metadata=owner).jobs) == 2
    assert len(jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=owner).jobs) == 2


def test_a_created_jobs_reply_stays_within_its_estimate(channel: grpc.Channel) -> None:
    """The up-front refusal rests on ``JOB_REPLY_OVERHEAD``: check it bounds real replies
    (an interval without anchor gains one, a 128-character owner is echoed)."""
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    owner = "o" * 128
    interval = types_pb2.Schedule(
        kind=types_pb2.SCHEDULE_KIND_INTERVAL, interval={"seconds": 86400}
    )
    specs = [
        handler_spec("a", "nobody"),
        handler_spec("b", "nobody", b"x", "0 0 1 1 *"),
        types_pb2.JobSpec(name="c" * 200, task=handler_spec("c", "nobody").task, schedule=interval),
    ]
    for i, spec in enumerate(specs):
        item = jobs_pb2.CreateJobRequest(spec=spec, idempotency_key=f"k{i}" * 66)
        request = jobs_pb2.CreateJobsRequest(jobs=[item])
        reply = jobs.CreateJobs(request, metadata=(("x-shardcron-owner", owner),))
        assert reply.ByteSize() <= request.ByteSize() + JOB_REPLY_OVERHEAD + len(owner)
