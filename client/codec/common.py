"""Field helpers every part of the codec shares: times, durations, counts, enums.

Readers take the message, the field's name and the path of the message (``field``)
and raise ``InvalidArgument("<path>.<name>", why)`` for what protobuf itself lets
through: a Timestamp outside years 1..9999 or with nanos outside 0..999,999,999, a
Duration whose seconds and nanos disagree in sign, a negative count, an enum number
the schema does not know. Writers leave a field unset for None, and raise
``InvalidArgument`` naming the field for a value protobuf cannot hold (an integer past
its field's range, text that is not Unicode, a time or duration outside protobuf's
range): ``build`` makes a message that way.

``ProtoEnum`` is one domain ``StrEnum`` <-> proto enum table, built once from the
domain enum and checked against the schema at import: a member added on one side
only fails loudly on import instead of on the first message that carries it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import (
    DstGap,
    DstOverlap,
    JobState,
    LateReason,
    MisfirePolicy,
    OverlapPolicy,
    RunLateness,
    RunReason,
    RunState,
    RunUsage,
    ScheduleKind,
)
from shardcron.v1 import types_pb2

E = TypeVar("E", bound=StrEnum)
M = TypeVar("M", bound=Message)
T = TypeVar("T")

# The range google.protobuf.Timestamp is defined over: 0001-01-01 .. 9999-12-31.
_MIN_SECONDS = -62_135_596_800
_MAX_SECONDS = 253_402_300_799
_MAX_NANOS = 999_999_999
# google.protobuf.Duration spans about +-10,000 years.
_MAX_DURATION_SECONDS = 315_576_000_000
_MAX_DURATION = timedelta(seconds=_MAX_DURATION_SECONDS)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def _path(field: str, name: str) -> str:
    return f"{field}.{name}" if field else name


def _assign(msg: Message, name: str, value: Any) -> None:
    fd = msg.DESCRIPTOR.fields_by_name[name]
    target = getattr(msg, name)
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        target.update(value)
    elif fd.is_repeated:
        target.extend(value)
    elif fd.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(msg, name, value)


def build(cls: type[M], field: str, **values: Any) -> M:
    """``cls(**values)``, raising ``InvalidArgument("<field>.<name>", why)`` for a value
    protobuf cannot hold instead of its bare ValueError or TypeError."""
    try:  # the constructor, in C, is four times faster than setting field by field
        return cls(**values)
    except (ValueError, TypeError, OverflowError):
        pass  # set one field at a time below, to name the one protobuf refuses
    msg = cls()
    for name, value in values.items():
        try:
            _assign(msg, name, value)
        except (ValueError, TypeError, OverflowError) as e:
            reason = str(e).split(":")[0] or type(e).__name__
            raise InvalidArgument(_path(field, name), f"cannot be sent: {reason}") from None
    return msg


def set_time(msg: Message, name: str, value: datetime | None, field: str = "") -> None:
    """Set Timestamp field ``name`` of ``msg`` (left unset for None); ``field`` is the
    path of ``msg``, for the error a value that is not a datetime raises."""
    if value is None:
        return
    if not isinstance(value, datetime):
        raise InvalidArgument(_path(field, name), "must be a datetime")
    # what Timestamp.FromDatetime does (naive reads as UTC), in plain integer arithmetic
    micros = (value - (_EPOCH if value.tzinfo is not None else _NAIVE_EPOCH)) // _MICROSECOND
    ts = getattr(msg, name)
    ts.seconds, rest = divmod(micros, 1_000_000)
    ts.nanos = rest * 1000


def get_time(msg: Message, name: str, field: str) -> datetime | None:
    """Timestamp field ``name`` as an aware UTC datetime, None when unset. ``field``
    is the path of ``msg`` ("" for a request's own fields)."""
    if not msg.HasField(name):
        return None
    ts = getattr(msg, name)
    seconds, nanos = ts.seconds, ts.nanos  # each read of a field builds a new int
    if not (_MIN_SECONDS <= seconds <= _MAX_SECONDS and 0 <= nanos <= _MAX_NANOS):
        raise InvalidArgument(_path(field, name), "not a valid timestamp")
    try:  # what Timestamp.ToDatetime(tzinfo=UTC) does, in one addition
        return _EPOCH + timedelta(0, seconds, nanos // 1000)  # positional: no keyword parsing
    except (ValueError, OverflowError):
        raise InvalidArgument(_path(field, name), "not a valid timestamp") from None


def get_required_time(msg: Message, name: str, field: str) -> datetime:
    value = get_time(msg, name, field)
    if value is None:
        raise InvalidArgument(_path(field, name), "required")
    return value


def set_duration(msg: Message, name: str, value: timedelta | None, field: str = "") -> None:
    """Set Duration field ``name`` of ``msg`` (left unset for None); ``field`` is the path
    of ``msg``, for the error a duration outside protobuf's +-10,000 years raises."""
    if value is None:
        return
    if not isinstance(value, timedelta) or abs(value) > _MAX_DURATION:
        raise InvalidArgument(_path(field, name), "not a duration protobuf can hold")
    # what Duration.FromTimedelta does, a fifth faster: nanos take the sign of seconds,
    # as protobuf normalizes a Duration
    seconds, micros = divmod(value // _MICROSECOND, 1_000_000)
    if seconds < 0 and micros:
        seconds, micros = seconds + 1, micros - 1_000_000
    d = getattr(msg, name)
    d.seconds = seconds
    d.nanos = micros * 1000


def get_duration(
    msg: Message, name: str, field: str, default: timedelta | None = None
) -> timedelta | None:
    """Duration field ``name`` as a timedelta (``default`` when unset); never negative."""
    if not msg.HasField(name):
        return default
    d = getattr(msg, name)
    seconds, nanos = d.seconds, d.nanos
    mixed_signs = (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0)
    if mixed_signs or abs(seconds) > _MAX_DURATION_SECONDS or abs(nanos) > _MAX_NANOS:
        raise InvalidArgument(_path(field, name), "not a valid duration")
    if seconds < 0 or nanos < 0:
        raise InvalidArgument(_path(field, name), "must not be negative")
    # what Duration.ToTimedelta does for a duration that is not negative, a quarter faster
    return timedelta(seconds=seconds, microseconds=nanos // 1000)


def non_negative(value: int, path: str) -> int:
    if value < 0:
        raise InvalidArgument(path, "must not be negative")
    return value


def each(items: Sequence[Any], path: str, read: Callable[[Any, str], T]) -> tuple[T, ...]:
    """``read(item, "path[i]")`` of every item of a repeated field."""
    return tuple(read(item, f"{path}[{i}]") for i, item in enumerate(items))


def fencing_token(value: int, path: str, index: int | None = None) -> int:
    """``value`` as a fencing token on the wire: not negative, else InvalidArgument
    naming ``path[index].fencing_token``, formatted only then (this runs per run)."""
    if value >= 0:
        return value
    where = path if index is None else f"{path}[{index}]"
    return non_negative(value, f"{where}.fencing_token")


def usage_to_proto(usage: RunUsage) -> types_pb2.RunUsage:
    return types_pb2.RunUsage(
        peak_memory_bytes=usage.peak_memory_bytes,
        cpu_seconds=usage.cpu_seconds,
        limits_enforced=usage.limits_enforced,
    )


def usage_from_proto(msg: Any, path: str) -> RunUsage | None:
    """The ``usage`` of a run or a run's result (``path`` names the message holding it),
    None when unset; a negative or non-finite figure is InvalidArgument naming it."""
    if not msg.HasField("usage"):
        return None
    usage = msg.usage
    cpu = usage.cpu_seconds
    if not 0.0 <= cpu < float("inf"):  # NaN fails too
        raise InvalidArgument(f"{path}.usage.cpu_seconds", "must be a finite number, not negative")
    return RunUsage(
        peak_memory_bytes=non_negative(usage.peak_memory_bytes, f"{path}.usage.peak_memory_bytes"),
        cpu_seconds=cpu,
        limits_enforced=usage.limits_enforced,
    )


def lateness_to_proto(lateness: RunLateness) -> types_pb2.RunLateness:
    msg = types_pb2.RunLateness(reason=LATE_REASON.to_proto(lateness.reason), text=lateness.text)
    set_duration(msg, "waited", lateness.waited)
    return msg


def lateness_from_proto(msg: Any, path: str) -> RunLateness | None:
    """The ``lateness`` of a run (``path`` names the run), None when unset."""
    if not msg.HasField("lateness"):
        return None
    late, where = msg.lateness, f"{path}.lateness"
    return RunLateness(
        reason=LATE_REASON.from_proto(late.reason, f"{where}.reason", LateReason.NONE),
        text=late.text,
        waited=get_duration(late, "waited", where, timedelta(0)) or timedelta(0),
    )


def required_text(value: str, path: str) -> str:
    if not value:
        raise InvalidArgument(path, "required")
    return value


class ProtoEnum(Generic[E]):
    """One domain enum <-> one proto enum: ``RunState.SUCCEEDED`` <-> ``RUN_STATE_SUCCEEDED``.

    The domain member whose value is empty (``RunReason.NONE``) is the proto's
    UNSPECIFIED (0). Reading UNSPECIFIED gives ``default``, or raises "required" when
    the enum has none; reading a number the schema does not know raises.
    """

    def __init__(
        self, domain: type[E], pb_enum: Any, prefix: str, default: E | None = None
    ) -> None:
        self.domain = domain
        self.default = default
        self._to: dict[E, int] = {}
        for member in domain:
            self._to[member] = pb_enum.Value(prefix + (member.value or "UNSPECIFIED"))
        # the members by number, UNSPECIFIED only where a member stands for it: a hot
        # path's first look (``from_proto`` gives the default and names a bad field)
        self.by_number: dict[int, E] = {number: member for member, number in self._to.items()}
        unknown = set(pb_enum.values()) - set(self.by_number) - {0}
        if unknown:  # the schema has a value the domain lacks
            names = sorted(pb_enum.Name(n) for n in unknown)
            raise TypeError(f"{domain.__name__} has no member for {', '.join(names)}")

    def to_proto(self, value: E | str) -> int:
        """Raises InvalidArgument (named after the enum) for a value it does not have."""
        try:
            number = self._to.get(value)  # a member, or its text (a StrEnum hashes as it)
        except TypeError:  # unhashable: refused below
            number = None
        if number is not None:
            return number
        try:
            return self._to[self.domain(value)]
        except ValueError:
            raise InvalidArgument(self.domain.__name__, f"unknown value {value!r:.64}") from None

    def from_proto(self, number: int, field: str, default: E | None = None) -> E:
        """``default`` (else the table's own) stands for UNSPECIFIED."""
        member = self.by_number.get(number)
        if member is not None:
            return member
        if number != 0:
            raise InvalidArgument(field, f"unknown value {number}")
        fallback = default if default is not None else self.default
        if fallback is None:
            raise InvalidArgument(field, "required")
        return fallback


# The tables, one per enum of types.proto; the defaults are what UNSPECIFIED reads as
# (types.proto documents them). A state has none: it is required where it is read.
SCHEDULE_KIND = ProtoEnum(
    ScheduleKind, types_pb2.ScheduleKind, "SCHEDULE_KIND_", ScheduleKind.IMMEDIATE
)
DST_GAP = ProtoEnum(DstGap, types_pb2.DstGap, "DST_GAP_", DstGap.SHIFT)
DST_OVERLAP = ProtoEnum(DstOverlap, types_pb2.DstOverlap, "DST_OVERLAP_", DstOverlap.FIRST)
OVERLAP_POLICY = ProtoEnum(
    OverlapPolicy, types_pb2.OverlapPolicy, "OVERLAP_POLICY_", OverlapPolicy.ALLOW
)
MISFIRE_POLICY = ProtoEnum(
    MisfirePolicy, types_pb2.MisfirePolicy, "MISFIRE_POLICY_", MisfirePolicy.RUN_ONCE
)
JOB_STATE = ProtoEnum(JobState, types_pb2.JobState, "JOB_STATE_")
RUN_STATE = ProtoEnum(RunState, types_pb2.RunState, "RUN_STATE_")
RUN_REASON = ProtoEnum(RunReason, types_pb2.RunReason, "RUN_REASON_")  # UNSPECIFIED is NONE
LATE_REASON = ProtoEnum(LateReason, types_pb2.LateReason, "LATE_REASON_")  # UNSPECIFIED is NONE
