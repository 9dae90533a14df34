"""A stand-in for the SDK's ``Client`` in the CLI's tests, and how they invoke the CLI.

``FakeClient`` records every call the CLI makes and answers from what a test gave it;
``invoke`` runs the ``shardcron`` command group in-process with it (or with a client
factory that fails, ``no_server``), the way a user's shell would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result

from shardcron.client.cli import cli
from shardcron.client.errors import (
    ShardcronError,
)
from shardcron.client.types import (
    CommandTask,
    Fire,
    Job,
    JobSpec,
    JobState,
    OutputChunk,
    Page,
    RetryPolicy,
    Run,
    RunState,
    Schedule,
)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def no_server(*args: Any, **kwargs: Any) -> Any:
    pytest.fail("a usage error must not reach the server")


def invoke(args: list[str], obj: Any = no_server) -> Result:
    return CliRunner().invoke(cli, args, obj=obj)


def make_job(spec: JobSpec, *, version: int = 3) -> Job:
    return Job(
        id="job-1",
        owner="default",
        spec=spec,
        state=JobState.ACTIVE,
        version=version,
        created_at=T0,
        updated_at=T0,
    )


def make_run(state: RunState = RunState.SUCCEEDED) -> Run:
    return Run(
        id="run-1",
        job_id="job-1",
        owner="default",
        fire_key="k",
        fire_at=T0,
        due_at=T0,
        state=state,
    )


class FakeClient:
    """Stands in for ``Client``: records calls, returns canned objects, or raises ``error``."""

    def __init__(
        self, error: ShardcronError | None = None, run_state: RunState = RunState.SUCCEEDED
    ):
        self.error = error
        self.run_state = run_state
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.connected: dict[str, Any] = {}
        self.closed = False
        self.current = make_job(
            JobSpec(
                name="old",
                task=CommandTask(argv=("/bin/true",), env={"A": "1"}),
                schedule=Schedule.cron_expr("0 9 * * *", "Europe/Berlin"),
                retry=RetryPolicy(max_attempts=4),
            ),
            version=7,
        )

    def __call__(self, target: str, **kwargs: Any) -> FakeClient:
        self.connected = {"target": target, **kwargs}
        return self

    def close(self) -> None:
        self.closed = True

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if self.error is not None:
            raise self.error

    def create_job(self, spec: JobSpec, *, idempotency_key: str = "") -> Job:
        self._record("create_job", spec, idempotency_key=idempotency_key)
        return make_job(spec)

    def get_job(self, job_id: str) -> Job:
        self._record("get_job", job_id)
        return self.current

    def update_job(self, job_id: str, spec: JobSpec, *, expected_version: int) -> Job:
        self._record("update_job", job_id, spec, expected_version=expected_version)
        return make_job(spec, version=expected_version + 1)

    def get_run(self, run_id: str) -> Run:
        self._record("get_run", run_id)
        return make_run(self.run_state)

    def wait_run(self, run_id: str, *, timeout: float | None = None) -> Run:
        self._record("wait_run", run_id, timeout=timeout)
        return make_run(self.run_state)

    def list_runs(self, job_id: str, **kwargs: Any) -> Page[Run]:
        self._record("list_runs", job_id, **kwargs)
        return Page(items=[make_run(self.run_state)], next_page_token="")

    def preview_fires(self, source: Any, *, count: int = 10, after: Any = None) -> list[Fire]:
        self._record("preview_fires", source, count=count)
        return [Fire(key=f"k{i}", at=T0 + timedelta(hours=i), local=T0) for i in range(count)]

    def read_output(
        self, run_id: str, *, offset: int = 0, follow: bool = False, limit: int = 0
    ) -> Any:
        self._record("read_output", run_id, offset=offset, follow=follow, limit=limit)
        yield OutputChunk(run_id=run_id, offset=0, data=b"hello \xff")
        yield OutputChunk(run_id=run_id, offset=7, data=b"world\n", stream="stderr", eof=True)
