"""Secret env values: what a create or an update stores, decided in one place.

A command's ``secret_env`` values are write-only. Every JobService reply shows each
value as ``SECRET_PLACEHOLDER`` (``codec.job_to_proto`` redacts by default), so a
client that reads a job, changes it and sends it back sends placeholders. The rule:

- **create**: a value of ``SECRET_PLACEHOLDER`` is refused (INVALID_ARGUMENT: there is
  no stored value it could stand for); an empty value means the key is not set;
- **update**: a key left out, or sent as ``SECRET_PLACEHOLDER``, keeps its stored
  value; a key sent as ``""`` is removed; any other value replaces it. An update that
  makes the task a handler drops them all (a handler has no environment).

Only the poller reads the values back, to put them in a worker's lease. They are
stored with the job, like the rest of its spec: sealed (encrypted) when the node has a
key file (``sealing``), as given otherwise. A value that looks sealed is refused.
"""

from __future__ import annotations

import dataclasses

from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import clip
from shardcron.client.types import SECRET_PLACEHOLDER, CommandTask, JobSpec
from shardcron.coordinator.sealing import refuse_sealed_form


def secrets_for_create(spec: JobSpec, field: str = "spec") -> JobSpec:
    """``spec`` with unset (empty) secrets left out; raises InvalidArgument for a
    placeholder value."""
    task = spec.task
    if not isinstance(task, CommandTask) or not task.secret_env:
        return spec
    for key, value in task.secret_env.items():
        if value == SECRET_PLACEHOLDER:
            raise InvalidArgument(
                f"{field}.task.command.secret_env[{clip(key)}]",
                f"{SECRET_PLACEHOLDER!r} keeps a stored value, and a new job has none",
            )
        refuse_sealed_form(key, value, field)
    kept = {k: v for k, v in task.secret_env.items() if v}
    return spec.replace(task=dataclasses.replace(task, secret_env=kept))


def secrets_for_update(stored: JobSpec, sent: JobSpec) -> JobSpec:
    """``sent`` with its secrets merged onto the stored ones, by the rule above."""
    task = sent.task
    if not isinstance(task, CommandTask):
        return sent
    merged = dict(stored.task.secret_env) if isinstance(stored.task, CommandTask) else {}
    for key, value in task.secret_env.items():
        if value == SECRET_PLACEHOLDER and key in merged:
            continue
        if value == SECRET_PLACEHOLDER:
            raise InvalidArgument(
                f"spec.task.command.secret_env[{clip(key)}]",
                f"{SECRET_PLACEHOLDER!r} keeps a stored value, and the job has none",
            )
        refuse_sealed_form(key, value, "spec")
        if value:
            merged[key] = value
        else:
            merged.pop(key, None)
    return sent.replace(task=dataclasses.replace(task, secret_env=merged))
