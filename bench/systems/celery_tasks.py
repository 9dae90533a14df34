"""The Celery app and the one task of the Celery + Redis peer (see ``celery_redis``).

Worker processes load it with ``celery -A bench.systems.celery_tasks worker -b URL
--result-backend URL ...``: the command line sets the broker, the result backend and
the prefetch multiplier, so the module-level ``app`` needs no URLs of its own (the
``-b``/``--result-backend`` options reach it through ``CELERY_BROKER_URL`` and
``CELERY_RESULT_BACKEND``). The submitting side builds its own app with ``make_app``;
both register the task under the same name, which is all a message carries.
"""

from __future__ import annotations

import time

from celery import Celery

NOOP = "bench.noop"


def noop() -> float:
    """The job: nothing but noting when it started (``time.time()``), so the client can
    compute start lag from the stored results."""
    return time.time()


def make_app(broker: str | None = None, backend: str | None = None) -> Celery:
    app = Celery("bench", broker=broker, backend=backend)
    app.conf.update(
        # Every task, including the built-in ``celery.starmap`` that runs a chunk, is
        # acknowledged after it ran, as BENCHMARKS.md asks of this peer.
        task_acks_late=True,
        # A worker that starts before Redis answers should wait, not give up.
        broker_connection_retry_on_startup=True,
        # Results stay long enough to be read once the run is over.
        result_expires=3600,
    )
    app.task(name=NOOP, acks_late=True)(noop)
    return app


app = make_app()
