"""A ``PollerLink`` for tests of the api alone: it records the runs hinted and answers
the rest as a poller holding nothing would."""

from __future__ import annotations

from collections.abc import Sequence

from shardcron.client.overview import OverviewPart, OverviewWindow
from shardcron.client.types import Job, Run, RunReason


class HintLog:
    def __init__(self) -> None:
        self.runs: list[Run] = []

    def runs_created(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        self.runs += runs

    async def cancel(self, run: Run, reason: RunReason) -> Run:
        return run

    def cancel_job(self, job_id: str, reason: RunReason) -> None:
        pass

    def job_changed(self, job: Job) -> None:
        pass

    async def waiting_reasons(self, runs: Sequence[Run]) -> dict[str, str]:
        return {}

    async def overview_parts(self, owner: str, window: OverviewWindow) -> list[OverviewPart]:
        return []
