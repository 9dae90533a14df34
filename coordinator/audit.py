"""The audit log: one structured line for every write to the job API.

Every call of a write method (``WRITES``: create, update, delete, cancel, pause,
resume, replay, drop, run-now) logs exactly one line on the ``shardcron.audit``
logger, at INFO, whatever its outcome: a JSON object with

- ``at``: when the call ended (UTC, ISO 8601 with microseconds),
- ``principal``: who called (``principal_of(context)``: the auth file's principal name;
  ``"anonymous"`` on a node without an auth file),
- ``owner``: the owner the call acted for (``owner_of(context)``; the raw header,
  clipped, when it is not a valid owner),
- ``method``: the gRPC method name (``CreateJob``),
- ``job_ids`` / ``run_ids``: the ids the request named and the reply created,
- ``outcome``: ``"OK"`` or the status code's name (``"INVALID_ARGUMENT"``),
- ``reason``: for a call that failed, the status message (clipped), so a refusal says
  why it was refused.

Every line, this module's and ``auth.refusals``', is written by ``emit``: ASCII JSON
(any other character escaped), so an id holding a line or paragraph separator, or a
control character, can never split or forge a line of the log.

Nothing else of a request is logged (never a spec), so no secret env value can reach
the log. ``AuditInterceptor`` sits outside the decoding interceptor (inside
authentication, which sets the caller it names): it sees the raw request bytes and
decodes the ids itself, so even a request that does not decode is logged, with its
status. The HTTP edge, which calls the servicers in-process without interceptors,
logs its writes with ``log_write``, in the same form. A call refused for its credential
never reaches this interceptor: ``auth.refusals`` logs it, on the same logger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from shardcron.client.errors import ShardcronError
from shardcron.client.limits import clip
from shardcron.client.types import OWNER_HEADER
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.interceptors import Behavior, UnaryJobServiceInterceptor
from shardcron.v1 import jobs_pb2

audit_log = logging.getLogger("shardcron.audit")

WRITES = frozenset(
    {
        "CreateJob",
        "CreateJobs",
        "UpdateJob",
        "DeleteJob",
        "PauseJob",
        "ResumeJob",
        "RunJobNow",
        "CancelRun",
        "ReplayDeadLetters",
        "DropDeadLetters",
    }
)
JOB_SERVICE_PREFIX = "/shardcron.v1.JobService/"
MAX_LOGGED_IDS = 100  # per list: a batch of 10,000 creates logs its first ids and a count
MAX_REASON = 500  # characters of a failed call's message logged
ANONYMOUS = "anonymous"

Who = Callable[[grpc.aio.ServicerContext], str]


def written_by(full_method: str) -> str | None:
    """The write a full gRPC method name (``/shardcron.v1.JobService/CreateJob``) is, or
    None for any other method."""
    name = full_method.removeprefix(JOB_SERVICE_PREFIX)
    return name if name != full_method and name in WRITES else None


def anonymous(context: grpc.aio.ServicerContext) -> str:
    """The principal of a call while no credentials are configured."""
    return ANONYMOUS


def _request_class(method: str) -> type[Message]:
    descriptor = jobs_pb2.DESCRIPTOR.services_by_name["JobService"].methods_by_name[method]
    return getattr(jobs_pb2, descriptor.input_type.name)  # type: ignore[no-any-return]


def _ids(messages: Iterable[Message | None]) -> tuple[list[str], list[str]]:
    """The job and run ids named in these requests and replies, each once, in order."""
    jobs: dict[str, None] = {}
    runs: dict[str, None] = {}
    for msg in messages:
        if msg is None:
            continue
        name = msg.DESCRIPTOR.name
        fields = {f.name for f in msg.DESCRIPTOR.fields}
        if name == "Job":
            jobs[msg.id] = None  # type: ignore[attr-defined]
        elif name == "Run":
            jobs[msg.job_id] = None  # type: ignore[attr-defined]
            runs[msg.id] = None  # type: ignore[attr-defined]
        if "job_id" in fields and name != "Run":
            jobs[msg.job_id] = None  # type: ignore[attr-defined]
        if "run_id" in fields:
            runs[msg.run_id] = None  # type: ignore[attr-defined]
        if "run_ids" in fields:
            runs.update(dict.fromkeys(msg.run_ids))  # type: ignore[attr-defined]
        if name == "CreateJobResponse":
            jobs[msg.job.id] = None  # type: ignore[attr-defined]
        if name == "CreateJobsResponse":
            jobs.update(dict.fromkeys(r.job.id for r in msg.jobs))  # type: ignore[attr-defined]
        if name == "ListRunsResponse":
            runs.update(dict.fromkeys(r.id for r in msg.runs))  # type: ignore[attr-defined]
    return [j for j in jobs if j], [r for r in runs if r]


def _listed(key: str, ids: list[str], line: dict[str, Any]) -> None:
    line[key] = [clip(i) for i in ids[:MAX_LOGGED_IDS]]
    if len(ids) > MAX_LOGGED_IDS:
        line[f"{key}_count"] = len(ids)


def audit_line(
    *,
    principal: str,
    owner: str,
    method: str,
    job_ids: list[str],
    run_ids: list[str],
    outcome: str,
    reason: str = "",
) -> dict[str, Any]:
    """The fields of one audit line, in their order."""
    line: dict[str, Any] = {"at": utcnow().isoformat(), "principal": principal}
    line.update(owner=owner, method=method)
    _listed("job_ids", job_ids, line)
    _listed("run_ids", run_ids, line)
    line["outcome"] = outcome
    if outcome != "OK" and reason:
        line["reason"] = clip(reason, MAX_REASON)
    return line


def emit(line: dict[str, Any], level: int = logging.INFO) -> None:
    """Writes one line on the audit logger, as ASCII JSON."""
    audit_log.log(level, "%s", json.dumps(line, separators=(",", ":"), ensure_ascii=True))


def log_write(
    *,
    principal: str,
    owner: str,
    method: str,
    messages: Iterable[Message | None],
    outcome: str,
    reason: str = "",
) -> None:
    """Logs the audit line of one write: the ids are read from ``messages`` (its request
    and its reply, either None when there is none); ``reason`` is why it failed."""
    job_ids, run_ids = _ids(messages)
    emit(
        audit_line(
            principal=principal,
            owner=owner,
            method=method,
            job_ids=job_ids,
            run_ids=run_ids,
            outcome=outcome,
            reason=reason,
        )
    )


def owner_named(header: str | None) -> str:
    """How a line names the owner of a call refused before its owner was known: the
    header as sent, clipped, marked ``invalid:`` (``""`` when it named none)."""
    return "" if header is None else f"invalid:{clip(str(header))}"


def log_refused_write(
    *,
    method: str,
    error: ShardcronError,
    principal: str = ANONYMOUS,
    owner: str = "",
    messages: Iterable[Message | None] = (),
) -> None:
    """Logs the audit line of a write refused before it reached its servicer (its
    request malformed or too large, its site or owner refused), on either edge. A
    refused credential is ``auth.refusals``' to log, not this."""
    code = error.code
    log_write(
        principal=principal,
        owner=owner,
        method=method,
        messages=messages,
        outcome=code,
        reason=error.message,
    )


def _details(context: grpc.aio.ServicerContext) -> str:
    try:
        return str(context.details() or "")
    except Exception:  # a context that keeps no details
        return ""


class AuditInterceptor(UnaryJobServiceInterceptor):
    """Logs one audit line per call of a write method; see the module docstring."""

    def __init__(self, *, owner_of: Who, principal_of: Who = anonymous) -> None:
        self.owner_of = owner_of
        self.principal_of = principal_of

    def wrap_unary(self, method: str, behavior: Behavior) -> Behavior | None:
        if method not in WRITES:
            return None
        request_class = _request_class(method)

        async def audited(request: Any, context: grpc.aio.ServicerContext) -> Any:
            response = None
            try:
                response = await behavior(request, context)
                return response
            finally:
                self._log(method, request_class, request, response, context)

        return audited

    def _log(
        self,
        method: str,
        request_class: type[Message],
        request: Any,
        response: Any,
        context: grpc.aio.ServicerContext,
    ) -> None:
        if isinstance(request, bytes):  # the decoding interceptor runs inside this one
            try:
                request = request_class.FromString(request)
            except Exception:
                request = None
        code = context.code()
        outcome = "OK" if code in (None, grpc.StatusCode.OK) else code.name
        if response is None and outcome == "OK":
            outcome = "CANCELLED"  # ended with neither a reply nor a status: the caller left
        log_write(
            principal=self._who(self.principal_of, context),
            owner=self._who(self.owner_of, context),
            method=method,
            messages=[request, response],
            outcome=outcome,
            reason=_details(context) if outcome != "OK" else "",
        )

    @staticmethod
    def _who(read: Who, context: grpc.aio.ServicerContext) -> str:
        try:
            return read(context)
        except ShardcronError:
            for key, value in context.invocation_metadata() or ():
                if key == OWNER_HEADER:
                    return owner_named(value)
            return "invalid"
