"""A bystander: another owner's job firing every second while a test attacks the node,
whose runs say whether the attack slowed the node for everyone else.

``Victim.start`` creates the job (the built-in ``noop`` handler, every ``EVERY``);
``Victim.late_runs(since, until)`` lists its fires due in that span that did not start
within ``ON_TIME`` of their due instant (never started counts as late);
``victim_on_time(victim)`` asserts there is none for the span of a ``with`` block,
which must last a few seconds (``repeat_for`` makes a quick attack again and again). A node that is not slowed down starts them within milliseconds; the bound is
generous because a test machine is busy, and far below what an attack that stalls
the event loop causes (seconds).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from shardcron.client.sdk import Client
from shardcron.client.types import HandlerTask, JobSpec, Run, RunState, Schedule

ON_TIME = timedelta(seconds=1)
EVERY = timedelta(seconds=1)


class Victim:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.job_id = ""

    def start(self) -> Victim:
        job = self.client.create_job(
            JobSpec(
                name=f"victim-{uuid.uuid4().hex[:6]}",
                task=HandlerTask(name="noop"),
                schedule=Schedule.every(EVERY),
            )
        )
        self.job_id = job.id
        return self

    def stop(self) -> None:
        self.client.delete_job(self.job_id)

    def runs(self, since: datetime, until: datetime) -> list[Run]:
        """Its runs due in ``[since, until)``."""
        found = []
        for run in self.client.iter_runs(self.job_id):
            if since <= run.due_at < until:
                found.append(run)
            elif run.due_at < since:
                break  # newest first
        return found

    def late_runs(self, since: datetime, until: datetime) -> list[tuple[Run, float | None]]:
        """Its runs due in ``[since, until)`` not started within ``ON_TIME``, with their
        lag in seconds (None: not started). ``until`` should lie a few seconds back, so
        that every run due before it had the time to start."""
        runs = self.runs(since, until)
        assert runs, f"the victim job had no run due between {since} and {until}"
        late = []
        for run in runs:
            started = run.started_at
            if started is None or run.state in (RunState.MISSED, RunState.SKIPPED):
                late.append((run, None))
            elif started - run.due_at > ON_TIME:
                late.append((run, (started - run.due_at).total_seconds()))
        return late


def now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def victim_on_time(victim: Victim) -> Iterator[None]:
    """Asserts, once the block is done, that every fire of ``victim`` due during it
    started within ``ON_TIME``."""
    since = now()
    yield
    until = now()
    time.sleep((ON_TIME + timedelta(seconds=1)).total_seconds())
    late = victim.late_runs(since, until)
    assert not late, f"victim runs late while attacked: {[(r.id, lag) for r, lag in late]}"


def repeat_for(seconds: float) -> Iterator[int]:
    """0, 1, 2, ... until ``seconds`` have passed: an attack made again and again, so
    that the victim has fires due while it lasts."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        yield i
        i += 1
