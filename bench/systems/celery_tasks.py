"""The Celery app and the one task of the Celery + Redis peer (see ``celery_redis``).

Worker processes load it with ``celery -A bench.systems.celery_tasks worker -b URL
--result-backend URL ...``: the command line sets the broker, the result backend and
the prefetch multiplier, so the module-level ``app`` needs no URLs of its own (the
``-b``/``--result-backend`` options reach it through ``CELERY_BROKER_URL`` and
``CELERY_RESULT_BACKEND``). The submitting side builds its own app with ``make_app``;
both register the tasks under the same names, which is all a message carries. With
``BENCH_BEAT_JOBS=N`` in its environment, ``celery beat`` on this module schedules W4's
fleet: N entries on ``crontab()`` (every minute), each sending ``bench.fire(i)``.
"""

from __future__ import annotations

import os
import subprocess
import time

from celery import Celery
from celery.schedules import crontab

NOOP = "bench.noop"
TRUE = "bench.true"  # W6: runs the `true` command
FIRE = "bench.fire"  # W4: one cron job's fire
BEAT_JOBS_ENV = "BENCH_BEAT_JOBS"  # W4: how many every-minute entries beat schedules


def noop() -> float:
    """The job: nothing but noting when it started (``time.time()``), so the client can
    compute start lag from the stored results."""
    return time.time()


def true_command() -> float:
    """W6's job: the ``true`` command as a child process; returns when it started."""
    started = time.time()
    subprocess.run(["true"], check=True)
    return started


def fire(job: int) -> list[float]:
    """W4's job: which cron job fired, and when its task started."""
    return [float(job), time.time()]


def make_app(broker: str | None = None, backend: str | None = None) -> Celery:
    app = Celery("bench", broker=broker, backend=backend)
    app.conf.update(
        # Every task, including the built-in ``celery.starmap`` that runs a chunk, is
        # acknowledged after it ran, as docs/benchmarks.md configures this peer.
        task_acks_late=True,
        # A worker that starts before Redis answers should wait, not give up.
        broker_connection_retry_on_startup=True,
        # Results stay long enough to be read once the run is over.
        result_expires=3600,
    )
    app.task(name=NOOP, acks_late=True)(noop)
    app.task(name=TRUE, acks_late=True)(true_command)
    app.task(name=FIRE, acks_late=True)(fire)
    # W4's fleet, read by `celery beat`: BENCH_BEAT_JOBS entries, every minute
    beat_jobs = int(os.environ.get(BEAT_JOBS_ENV, "0"))
    app.conf.beat_schedule = {
        f"job{i}": {"task": FIRE, "schedule": crontab(), "args": (i,)} for i in range(beat_jobs)
    }
    return app


app = make_app()
