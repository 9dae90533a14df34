"""Per-method gRPC metrics of a real node: calls, errors by status code, durations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from shardcron.coordinator.grpc_metrics import split_method
from shardcron.coordinator.node import Node
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from tests.support.local_node import started_node

JOBS = "shardcron.v1.JobService"
OWNER = (("x-shardcron-owner", "alice"),)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with started_node(tmp_path, "n1") as node:
        yield node


def sample(node: Node, name: str, **labels: str) -> float:
    return node.metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_full_method_name_splits_into_service_and_method() -> None:
    assert split_method("/shardcron.v1.JobService/GetJob") == (JOBS, "GetJob")


async def test_calls_errors_by_code_and_durations_are_counted_per_method(node: Node) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
        api = jobs_pb2_grpc.JobServiceStub(channel)
        await api.ListJobs(jobs_pb2.ListJobsRequest(), metadata=OWNER)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await api.GetJob(jobs_pb2.GetJobRequest(job_id="no-such-job"), metadata=OWNER)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await api.CreateJob(jobs_pb2.CreateJobRequest(), metadata=OWNER)  # no spec
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        output = api.ReadRunOutput(jobs_pb2.ReadRunOutputRequest(run_id="r"), metadata=OWNER)
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in output:
                pass
        assert streamed.value.code() == grpc.StatusCode.NOT_FOUND

    def calls(method: str) -> float:
        return sample(node, "shardcron_grpc_requests_total", service=JOBS, method=method)

    def errors(method: str, code: str) -> float:
        return sample(node, "shardcron_grpc_errors_total", service=JOBS, method=method, code=code)

    def timed(method: str) -> float:
        return sample(node, "shardcron_grpc_seconds_count", service=JOBS, method=method)

    assert [calls(m) for m in ("ListJobs", "GetJob", "CreateJob", "ReadRunOutput")] == [1] * 4
    assert errors("GetJob", "NOT_FOUND") == 1
    assert errors("CreateJob", "INVALID_ARGUMENT") == 1
    assert errors("ReadRunOutput", "NOT_FOUND") == 1
    assert errors("ListJobs", "OK") == 0
    assert [timed(m) for m in ("ListJobs", "GetJob", "CreateJob")] == [1] * 3
    assert timed("ReadRunOutput") == 0, "a stream's life is no latency"


async def test_a_request_that_does_not_decode_is_counted_as_invalid_argument(node: Node) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
        raw = channel.unary_unary(f"/{JOBS}/GetJob")
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await raw(b"\xff\xff\xff", metadata=OWNER)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        sample(
            node,
            "shardcron_grpc_errors_total",
            service=JOBS,
            method="GetJob",
            code="INVALID_ARGUMENT",
        )
        == 1
    )
