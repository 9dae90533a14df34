"""The mapping between domain types and protobuf for the job API: jobs, their specs,
tasks, schedules and policies, and a job's health. Runs are ``runs``'s, the cluster's
status ``cluster``'s.

``X_to_proto`` turns a domain object from ``shardcron.client.types`` into its
``shardcron.v1`` message; ``X_from_proto`` reads one back. Readers check structure only
(a task kind is set, an AT schedule has ``at``, durations are not negative, enum
values are known) and raise ``InvalidArgument`` naming the field path; what a value
means (cron syntax, zones, limits) is the server's to validate. UNSPECIFIED enum
values and unset fields read as the domain defaults documented in types.proto.

Writers raise ``InvalidArgument`` naming the field for a value protobuf cannot hold (an
integer past int32, text that is not Unicode), so an SDK caller gets the same error
family as from the server, never a bare ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta

from shardcron.client.codec.common import (
    DST_GAP,
    DST_OVERLAP,
    JOB_STATE,
    MISFIRE_POLICY,
    OVERLAP_POLICY,
    SCHEDULE_KIND,
    build,
    get_duration,
    get_required_time,
    get_time,
    non_negative,
    set_duration,
    set_time,
)
from shardcron.client.codec.notify import notify_from_proto, notify_to_proto
from shardcron.client.codec.runs import run_state_from_proto, run_state_to_proto
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import (
    SECRET_PLACEHOLDER,
    CommandTask,
    ConcurrencyPolicy,
    HandlerTask,
    Job,
    JobHealth,
    JobHealthRun,
    JobSpec,
    JobState,
    Resources,
    ResultLimits,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    Task,
)
from shardcron.v1 import types_pb2

__all__ = [
    "concurrency_from_proto",
    "concurrency_to_proto",
    "job_from_proto",
    "job_health_from_proto",
    "job_health_to_proto",
    "job_spec_from_proto",
    "job_specs_from_proto",
    "job_spec_to_proto",
    "job_state_from_proto",
    "job_state_to_proto",
    "job_to_proto",
    "resources_from_proto",
    "resources_to_proto",
    "retry_from_proto",
    "retry_to_proto",
    "schedule_from_proto",
    "schedule_to_proto",
    "task_from_proto",
    "task_to_proto",
]

# --------------------------------------------------------------------------- the job's state


def job_state_to_proto(state: JobState) -> int:
    return JOB_STATE.to_proto(state)


def job_state_from_proto(number: int, field: str = "state") -> JobState:
    return JOB_STATE.from_proto(number, field)


# --------------------------------------------------------------------------- schedule


def schedule_to_proto(s: Schedule, field: str = "schedule") -> types_pb2.Schedule:
    msg = build(
        types_pb2.Schedule,
        field,
        kind=SCHEDULE_KIND.to_proto(s.kind),
        cron=s.cron or "",
        timezone=s.timezone,
        dst_gap=DST_GAP.to_proto(s.dst_gap),
        dst_overlap=DST_OVERLAP.to_proto(s.dst_overlap),
    )
    for name in ("at", "anchor", "start_at", "end_at"):
        set_time(msg, name, getattr(s, name), field)
    set_duration(msg, "interval", s.interval, field)
    set_duration(msg, "jitter", s.jitter or None, field)
    return msg


def schedule_from_proto(msg: types_pb2.Schedule, field: str = "schedule") -> Schedule:
    """Raises InvalidArgument when the kind's own field is missing (AT without ``at``,
    CRON without ``cron``, INTERVAL without ``interval``)."""
    kind = SCHEDULE_KIND.from_proto(msg.kind, f"{field}.kind")
    s = Schedule(
        kind=kind,
        at=get_time(msg, "at", field),
        cron=msg.cron or None,
        timezone=msg.timezone or "UTC",
        interval=get_duration(msg, "interval", field),
        anchor=get_time(msg, "anchor", field),
        start_at=get_time(msg, "start_at", field),
        end_at=get_time(msg, "end_at", field),
        jitter=get_duration(msg, "jitter", field, timedelta(0)),  # type: ignore[arg-type]
        dst_gap=DST_GAP.from_proto(msg.dst_gap, f"{field}.dst_gap"),
        dst_overlap=DST_OVERLAP.from_proto(msg.dst_overlap, f"{field}.dst_overlap"),
    )
    if kind is ScheduleKind.AT and s.at is None:
        raise InvalidArgument(f"{field}.at", "required for an AT schedule")
    if kind is ScheduleKind.CRON and not s.cron:
        raise InvalidArgument(f"{field}.cron", "required for a CRON schedule")
    if kind is ScheduleKind.INTERVAL and s.interval is None:
        raise InvalidArgument(f"{field}.interval", "required for an INTERVAL schedule")
    return s


# --------------------------------------------------------------------------- task and policies


def task_to_proto(task: Task, field: str = "task", *, redact: bool = False) -> types_pb2.Task:
    """With ``redact`` every secret env value is ``SECRET_PLACEHOLDER`` (replies to users)."""
    if isinstance(task, CommandTask):
        command = build(
            types_pb2.CommandTask,
            f"{field}.command",
            argv=list(task.argv),
            env=task.env,
            cwd=task.cwd,
            secret_env=(
                dict.fromkeys(task.secret_env, SECRET_PLACEHOLDER) if redact else task.secret_env
            ),
            artifact=task.artifact,
        )
        return types_pb2.Task(command=command)
    if isinstance(task, HandlerTask):
        handler = build(
            types_pb2.HandlerTask, f"{field}.handler", name=task.name, payload=task.payload
        )
        return types_pb2.Task(handler=handler)
    raise InvalidArgument(field, "must be a CommandTask or a HandlerTask")


def task_from_proto(msg: types_pb2.Task, field: str = "task") -> Task:
    """Raises InvalidArgument when no kind is set, a command has no argv or a handler no name."""
    which = msg.WhichOneof("kind")
    if which == "command":
        if not msg.command.argv:
            raise InvalidArgument(f"{field}.command.argv", "must not be empty")
        return CommandTask(
            argv=tuple(msg.command.argv),
            env=dict(msg.command.env),
            cwd=msg.command.cwd,
            secret_env=dict(msg.command.secret_env),
            artifact=msg.command.artifact,
        )
    if which == "handler":
        if not msg.handler.name:
            raise InvalidArgument(f"{field}.handler.name", "required")
        return HandlerTask(name=msg.handler.name, payload=bytes(msg.handler.payload))
    raise InvalidArgument(field, "required: set a command or a handler")


def retry_to_proto(r: RetryPolicy, field: str = "retry") -> types_pb2.RetryPolicy:
    if r.max_attempts == 0:  # on the wire 0 means the default, 3: never send it for "none"
        raise InvalidArgument(f"{field}.max_attempts", "must be 1 to 100 (1 = no retry)")
    msg = build(
        types_pb2.RetryPolicy,
        field,
        max_attempts=r.max_attempts,
        multiplier=r.multiplier,
        jitter=r.jitter,
    )
    set_duration(msg, "initial_backoff", r.initial_backoff, field)
    set_duration(msg, "max_backoff", r.max_backoff, field)
    return msg


def retry_from_proto(msg: types_pb2.RetryPolicy, field: str = "retry") -> RetryPolicy:
    """0 and unset read as the defaults: max_attempts 3, multiplier 2.0, backoffs 1s and 5m."""
    d = RetryPolicy()
    if not math.isfinite(msg.multiplier) or msg.multiplier < 0:
        raise InvalidArgument(f"{field}.multiplier", "must be a non-negative number")
    if not math.isfinite(msg.jitter) or not 0 <= msg.jitter <= 1:
        raise InvalidArgument(f"{field}.jitter", "must be between 0 and 1")
    return RetryPolicy(
        max_attempts=non_negative(msg.max_attempts, f"{field}.max_attempts") or d.max_attempts,
        initial_backoff=get_duration(msg, "initial_backoff", field, d.initial_backoff),  # type: ignore[arg-type]
        multiplier=msg.multiplier or d.multiplier,
        max_backoff=get_duration(msg, "max_backoff", field, d.max_backoff),  # type: ignore[arg-type]
        jitter=msg.jitter,
    )


def concurrency_to_proto(
    c: ConcurrencyPolicy, field: str = "concurrency"
) -> types_pb2.ConcurrencyPolicy:
    return build(
        types_pb2.ConcurrencyPolicy,
        field,
        max_concurrent=c.max_concurrent,
        overlap=OVERLAP_POLICY.to_proto(c.overlap),
    )


def concurrency_from_proto(
    msg: types_pb2.ConcurrencyPolicy, field: str = "concurrency"
) -> ConcurrencyPolicy:
    """``max_concurrent`` is kept as sent (0 = the server's default for the policy)."""
    return ConcurrencyPolicy(
        max_concurrent=non_negative(msg.max_concurrent, f"{field}.max_concurrent"),
        overlap=OVERLAP_POLICY.from_proto(msg.overlap, f"{field}.overlap"),
    )


def resources_to_proto(r: Resources, field: str = "resources") -> types_pb2.Resources:
    msg = build(
        types_pb2.Resources,
        field,
        slots=r.slots,
        cpu_millis=r.cpu_millis,
        memory_mb=r.memory_mb,
        labels=r.labels,
        pids_limit=r.pids_limit,
        output_limit_bytes=r.output_limit_bytes,
    )
    if r.results != NO_RESULT_LIMITS:
        msg.results.CopyFrom(
            build(
                types_pb2.ResultLimits,
                f"{field}.results",
                max_files=r.results.max_files,
                max_file_bytes=r.results.max_file_bytes,
                max_bytes=r.results.max_bytes,
            )
        )
    return msg


NO_RESULT_LIMITS = ResultLimits()


def resources_from_proto(msg: types_pb2.Resources, field: str = "resources") -> Resources:
    """``slots`` 0 reads as 1."""
    return Resources(
        slots=non_negative(msg.slots, f"{field}.slots") or 1,
        cpu_millis=non_negative(msg.cpu_millis, f"{field}.cpu_millis"),
        memory_mb=non_negative(msg.memory_mb, f"{field}.memory_mb"),
        labels=dict(msg.labels),
        pids_limit=non_negative(msg.pids_limit, f"{field}.pids_limit"),
        output_limit_bytes=non_negative(msg.output_limit_bytes, f"{field}.output_limit_bytes"),
        results=ResultLimits(
            max_files=non_negative(msg.results.max_files, f"{field}.results.max_files"),
            max_file_bytes=non_negative(
                msg.results.max_file_bytes, f"{field}.results.max_file_bytes"
            ),
            max_bytes=non_negative(msg.results.max_bytes, f"{field}.results.max_bytes"),
        ),
    )


# --------------------------------------------------------------------------- job spec, job


def job_spec_to_proto(
    spec: JobSpec, field: str = "spec", *, redact: bool = False
) -> types_pb2.JobSpec:
    """Raises InvalidArgument naming the field (``spec.priority``) for a value protobuf
    cannot hold; what the server would refuse is left to the server. With ``redact``
    secret env values are ``SECRET_PLACEHOLDER``."""
    msg = build(
        types_pb2.JobSpec,
        field,
        name=spec.name,
        task=task_to_proto(spec.task, f"{field}.task", redact=redact),
        schedule=schedule_to_proto(spec.schedule, f"{field}.schedule"),
        priority=spec.priority,
        retry=retry_to_proto(spec.retry, f"{field}.retry"),
        concurrency=concurrency_to_proto(spec.concurrency, f"{field}.concurrency"),
        misfire=MISFIRE_POLICY.to_proto(spec.misfire),
        resources=resources_to_proto(spec.resources, f"{field}.resources"),
        pause_after_failures=spec.pause_after_failures,
        labels=spec.labels,
    )
    if spec.notify is not None:
        msg.notify.CopyFrom(notify_to_proto(spec.notify, f"{field}.notify"))
    set_duration(msg, "timeout", spec.timeout, field)
    set_duration(msg, "starting_deadline", spec.starting_deadline, field)
    return msg


def job_spec_from_proto(msg: types_pb2.JobSpec, field: str = "spec") -> JobSpec:
    """Read a spec off the wire; malformed input raises ``InvalidArgument("spec.<path>", why)``.

    Unset sub-messages (schedule, retry, concurrency, resources) read as the domain
    defaults: an immediate schedule, no retry, ``ConcurrencyPolicy()``, ``Resources()``.
    """
    if not msg.name:
        raise InvalidArgument(f"{field}.name", "required")
    if not msg.HasField("task"):
        raise InvalidArgument(f"{field}.task", "required: set a command or a handler")
    return JobSpec(
        name=msg.name,
        task=task_from_proto(msg.task, f"{field}.task"),
        schedule=schedule_from_proto(msg.schedule, f"{field}.schedule"),
        priority=msg.priority,
        retry=retry_from_proto(msg.retry, f"{field}.retry"),
        timeout=get_duration(msg, "timeout", field),
        concurrency=(
            concurrency_from_proto(msg.concurrency, f"{field}.concurrency")
            if msg.HasField("concurrency")
            else ConcurrencyPolicy()
        ),
        misfire=MISFIRE_POLICY.from_proto(msg.misfire, f"{field}.misfire"),
        starting_deadline=get_duration(msg, "starting_deadline", field),
        resources=resources_from_proto(msg.resources, f"{field}.resources"),
        pause_after_failures=non_negative(
            msg.pause_after_failures, f"{field}.pause_after_failures"
        ),
        labels=dict(msg.labels),
        notify=notify_from_proto(msg.notify, f"{field}.notify") if msg.HasField("notify") else None,
    )


def job_specs_from_proto(msgs: Iterable[types_pb2.JobSpec], field: str) -> list[JobSpec]:
    """The specs of a batch, the i-th read as ``job_spec_from_proto(msg, field.format(i))``.

    Specs sent as the same bytes are read once and share one JobSpec (frozen): a bulk
    submit of one job many times pays for one decode. Which error is raised does not
    change: the first spec that fails is the first of its bytes.
    """
    read: dict[bytes, JobSpec] = {}
    specs = []
    for i, msg in enumerate(msgs):
        wire = msg.SerializeToString()
        spec = read.get(wire)
        if spec is None:
            spec = read[wire] = job_spec_from_proto(msg, field.format(i))
        specs.append(spec)
    return specs


def job_to_proto(job: Job, *, redact: bool = True) -> types_pb2.Job:
    """The job as replies show it: secret env values redacted unless ``redact`` is False
    (only for what stays between nodes)."""
    msg = types_pb2.Job(
        id=job.id,
        owner=job.owner,
        spec=job_spec_to_proto(job.spec, redact=redact),
        state=job_state_to_proto(job.state),
        version=job.version,
        next_fire_key=job.next_fire_key,
        idempotency_key=job.idempotency_key,
        consecutive_failures=job.consecutive_failures,
        pause_reason=job.pause_reason,
        schedule_version=job.schedule_version,
    )
    set_time(msg, "created_at", job.created_at)
    set_time(msg, "updated_at", job.updated_at)
    set_time(msg, "next_fire_at", job.next_fire_at)
    if job.health is not None:
        msg.health.CopyFrom(job_health_to_proto(job.health))
    return msg


def job_health_to_proto(health: JobHealth) -> types_pb2.JobHealth:
    msg = types_pb2.JobHealth(succeeded=health.succeeded, rated=health.rated)
    for run in health.runs:
        one = msg.runs.add(run_id=run.run_id, state=run_state_to_proto(run.state))
        set_time(one, "due_at", run.due_at)
    return msg


def job_health_from_proto(msg: types_pb2.JobHealth, field: str = "health") -> JobHealth:
    """The runs alone: the counts follow from them."""
    return JobHealth(
        runs=tuple(
            JobHealthRun(
                run_id=r.run_id,
                state=run_state_from_proto(r.state, f"{field}.runs[{i}].state"),
                due_at=get_required_time(r, "due_at", f"{field}.runs[{i}]"),
            )
            for i, r in enumerate(msg.runs)
        )
    )


def job_from_proto(msg: types_pb2.Job, field: str = "job") -> Job:
    return Job(
        id=msg.id,
        owner=msg.owner,
        spec=job_spec_from_proto(msg.spec, f"{field}.spec"),
        state=job_state_from_proto(msg.state, f"{field}.state"),
        version=msg.version,
        created_at=get_required_time(msg, "created_at", field),
        updated_at=get_required_time(msg, "updated_at", field),
        next_fire_at=get_time(msg, "next_fire_at", field),
        next_fire_key=msg.next_fire_key,
        idempotency_key=msg.idempotency_key,
        consecutive_failures=msg.consecutive_failures,
        pause_reason=msg.pause_reason,
        schedule_version=msg.schedule_version or 1,
        health=job_health_from_proto(msg.health, f"{field}.health")
        if msg.HasField("health")
        else None,
    )
