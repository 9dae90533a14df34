"""A background sweep: one ``sweep()`` every ``interval`` until stopped.

The retention sweeps (``retention.RetentionSweeper``: final runs and their blobs;
``artifact_retention.ArtifactSweeper``: artifacts no job names) share this loop. A
sweep that raises is logged and tried again at the next interval: one failure never
ends the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

log = logging.getLogger(__name__)


class Sweep:
    """The loop; a subclass gives ``sweep`` and sets ``interval`` (and ``name``)."""

    name = "sweep"
    interval: timedelta
    _task: asyncio.Task[None] | None = None

    async def sweep(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # a top-level loop: log, and try again next time
                log.exception("%s failed; trying again in %s", self.name, self.interval)
            await asyncio.sleep(self.interval.total_seconds())
