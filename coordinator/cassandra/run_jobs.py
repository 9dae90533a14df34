"""Which job each run belongs to, as one store has seen it.

A run's job never changes (its id is derived from the job's), so what the store
learnt once stays true: the job id of a run it found in the due index, wrote, or
looked up in ``runs_by_id``. A read of runs by id then asks ``runs_by_id`` only for
the runs it has not seen; the poller's runs, found in the due index moments
before, need no lookup. A run remembered that no longer exists (expired) is simply
not found by the read of its job's partition. Bounded: past ``LIMIT`` entries it
forgets them all and learns again.
"""

from __future__ import annotations

LIMIT = 200_000


class RunJobs:
    """run id -> job id, bounded (module docstring)."""

    def __init__(self) -> None:
        self._jobs: dict[str, str] = {}

    def add(self, run_id: str, job_id: str) -> None:
        if len(self._jobs) >= LIMIT and run_id not in self._jobs:
            self._jobs.clear()
        self._jobs[run_id] = job_id

    def get(self, run_id: str) -> str | None:
        return self._jobs.get(run_id)
