"""What a lease carries to its worker, built in one place: the run's ids, fencing
token and instants, and its job's task with every sealed secret env value opened
(``coordinator.sealing``), its timeout and resources. A value this node cannot open
never reaches a worker: ``unopenable`` names it before the lease is granted, and the
run fails instead."""

from __future__ import annotations

from datetime import datetime

from shardcron.client.stream import LeaseGrant
from shardcron.client.types import Job, Run
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.sealing import SecretUnopenable, opened_task


def unopenable(config: PollerConfig, job: Job) -> SecretUnopenable | None:
    """Why the job's task cannot go out (a secret this node cannot open), or None."""
    try:
        opened_task(config.secret_keys, job.spec.task)
    except SecretUnopenable as error:
        return error
    return None


def lease_grant(run: Run, job: Job, config: PollerConfig, expires: datetime) -> LeaseGrant:
    spec = job.spec
    return LeaseGrant(
        run_id=run.id,
        job_id=run.job_id,
        owner=run.owner,
        fencing_token=run.lease_token,
        attempt=run.attempt,
        fire_at=run.fire_at,
        due_at=run.due_at,
        task=opened_task(config.secret_keys, spec.task),
        timeout=spec.timeout,
        lease_ttl=config.lease_ttl,
        resources=spec.resources,
        job_name=spec.name,
        expires_at=expires,
    )
