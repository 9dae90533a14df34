"""Artifacts no job refers to are deleted, once older than a grace after their upload.

An artifact lives while a job refers to it. What refers to one is recorded in the job
store before the job is written (``artifacts.record_refs``: a row per owner, digest
and job, ``JobStore.add_artifact_refs``), so the sweep never reads every job: every
``interval``, ``ArtifactSweeper`` lists the artifacts in the blob store (a listing of
``artifacts/``, as long as there are artifacts, not jobs), and for each one older
than ``grace`` reads the first references of its owner and digest (one partition)
and the jobs they name, one by one, until one still names it (not DELETED, its
command's artifact that digest): then the artifact stays. A reference whose job is
gone, DELETED or names another artifact now is removed as it is met; an artifact
left with none is deleted. So a sweep costs, per artifact past its grace, a read of
a few references and of the first job that still uses it.

The grace (default an hour) keeps an upload that a create has not named yet. A
create naming an artifact past its grace while a sweep finds it unreferenced may
lose that race (the sweep read the references before the create wrote its own, and
deletes after the create checked the blob): its runs then fail ``SPAWN_FAILED``
naming the artifact as not found, and uploading the archive again mends them. A
fault with one artifact is logged and the sweep goes on with the next; a failed
sweep is tried again at the next interval. Every node with the api role and a blob
store sweeps: the deletes are idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from shardcron.blobs.layout import BlobKind, owner_of
from shardcron.blobs.store import BlobStore
from shardcron.client.errors import NotFound
from shardcron.client.types import CommandTask, JobState
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.store import ArtifactRef, JobStore
from shardcron.coordinator.sweeps import Sweep

log = logging.getLogger(__name__)

DEFAULT_GRACE = timedelta(hours=1)
DEFAULT_INTERVAL = timedelta(minutes=10)
REFS_PAGE = 100  # references read at a time, until one whose job still names the artifact


class ArtifactSweeper(Sweep):
    """Deletes from ``blobs`` the artifacts no job of ``store`` refers to (module
    docstring), every ``interval`` until ``stop``."""

    name = "artifact-retention"

    def __init__(
        self,
        store: JobStore,
        blobs: BlobStore,
        *,
        grace: timedelta = DEFAULT_GRACE,
        interval: timedelta = DEFAULT_INTERVAL,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.grace = grace
        self.interval = interval
        self.clock = clock
        self.deleted = 0  # artifacts deleted since start

    async def sweep(self) -> int:
        """One sweep now; returns how many artifacts it deleted."""
        before = self.clock() - self.grace
        deleted = 0
        token = ""
        while True:
            page = await self.blobs.list(f"{BlobKind.ARTIFACTS}/", page_token=token)
            for entry in page.items:
                if entry.modified_at > before:
                    continue
                try:
                    owner, sha256 = owner_of(entry.key), entry.key.rsplit("/", 1)[1]
                    if await self._referenced(owner, sha256):
                        continue
                    await self.blobs.delete(entry.key)
                except Exception:  # one artifact's fault never stops the others
                    log.exception("artifact retention: %s could not be swept", entry.key)
                    continue
                deleted += 1
                log.info("artifact retention: deleted %s, which no job refers to", entry.key)
            token = page.next_page_token
            if not token:
                break
        self.deleted += deleted
        return deleted

    async def _referenced(self, owner: str, sha256: str) -> bool:
        """Whether a job of ``owner`` still names the artifact; the references read on
        the way whose jobs do not are removed."""
        forgotten: set[str] = set()
        while True:
            job_ids = await self.store.artifact_refs(owner, sha256, limit=REFS_PAGE)
            if not job_ids:
                return False
            if forgotten.issuperset(job_ids):  # a store that did not remove them
                raise RuntimeError(f"references to artifact {sha256} were not removed")
            stale = []
            for job_id in job_ids:
                if await self._names(owner, job_id, sha256):
                    await self._forget(owner, sha256, stale)
                    return True
                stale.append(job_id)
            await self._forget(owner, sha256, stale)
            forgotten.update(stale)

    async def _names(self, owner: str, job_id: str, sha256: str) -> bool:
        try:
            job = await self.store.get_job(owner, job_id)
        except NotFound:
            return False
        task = job.spec.task
        return (
            job.state is not JobState.DELETED
            and isinstance(task, CommandTask)
            and task.artifact == sha256
        )

    async def _forget(self, owner: str, sha256: str, job_ids: list[str]) -> None:
        if job_ids:
            refs = [ArtifactRef(owner=owner, sha256=sha256, job_id=j) for j in job_ids]
            await self.store.remove_artifact_refs(refs)
