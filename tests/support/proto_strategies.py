"""Hypothesis strategies for protobuf messages, built from their descriptors.

``messages(descriptor)`` draws any message a peer could send: each field set or not;
integers at their type's extremes; doubles with NaN and infinities; enums with numbers
the schema does not name; strings with NUL, any unicode but surrogates, and far past
every limit; Timestamp and Duration out of protobuf's range and with negative nanos;
repeated fields and maps of a few entries; at most one member of each oneof.

``hints`` maps a field name to values mixed in with the drawn ones (ids that exist,
cron expressions that parse), so that requests get past the first check. ``mutated``
makes a near-valid message: a valid one with one field, at any depth, drawn as above.
Invalid UTF-8 cannot be set on a message object: ``with_bad_utf8`` breaks one string
of a serialized message instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

Hints = Mapping[str, st.SearchStrategy[Any]]
NO_HINTS: Hints = MappingProxyType({})

MAX_DEPTH = 6  # no shardcron message nests deeper; the bound keeps recursion finite
MAX_ITEMS = 3  # entries of a repeated field or map

_T = FieldDescriptor
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

# Lengths past the limits of shardcron.client.limits, and past gRPC's trailer.
_LONG = (65, 129, 201, 257, 1025, 4097, 10_000, (128 << 10) + 1)


def _integers(low: int, high: int, *edges: int) -> st.SearchStrategy[int]:
    special = [
        v for v in (low, high, 0, 1, -1, 2**31 - 1, 2**53 - 1, 2**53, *edges) if low <= v <= high
    ]
    return st.one_of(
        st.sampled_from(special), st.integers(max(low, 0), min(high, 1000)), st.integers(low, high)
    )


def text() -> st.SearchStrategy[str]:
    """Strings a peer could send: short, any unicode protobuf holds, with a NUL, or long."""
    return st.one_of(
        st.text(alphabet="abcxyz019-_.:/@ *", max_size=12),
        st.text(st.characters(codec="utf-8"), max_size=24),
        st.builds(lambda a, b: f"{a}\0{b}", st.text(max_size=4), st.text(max_size=4)),
        st.sampled_from(_LONG).map(lambda n: "x" * n),
    )


def binary() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=32), st.sampled_from(_LONG).map(lambda n: b"\xff" * n))


def timestamp_seconds() -> st.SearchStrategy[int]:
    around_now = st.integers(1_700_000_000, 1_900_000_000)  # 2023 to 2030
    return st.one_of(around_now, _timestamp_edges())


def _timestamp_edges() -> st.SearchStrategy[int]:
    return _integers(
        *_INT64,
        -62_135_596_800,  # 0001-01-01, the bottom of protobuf's range
        -62_135_596_801,
        253_402_300_799,  # 9999-12-31T23:59:59, its top
        253_402_300_800,
        32_503_680_000,  # 3000-01-01
        221_845_392_000,  # 9000-01-01
        10**13,
    )


def duration_seconds() -> st.SearchStrategy[int]:
    return _integers(
        *_INT64, 315_576_000_000, 315_576_000_001, -315_576_000_000, 3653 * 86400, 3653 * 86400 + 1
    )


def nanos() -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from([0, -1, 999_999_999, 1_000_000_000, -1_000_000_000]), _integers(*_INT32)
    )


def _time_like(cls: type[Message], seconds: st.SearchStrategy[int]) -> st.SearchStrategy[Message]:
    return st.builds(lambda s, n: cls(seconds=s, nanos=n), seconds, st.one_of(st.just(0), nanos()))


_SCALARS: dict[int, Callable[[], st.SearchStrategy[Any]]] = {
    _T.TYPE_INT32: lambda: _integers(*_INT32),
    _T.TYPE_SINT32: lambda: _integers(*_INT32),
    _T.TYPE_SFIXED32: lambda: _integers(*_INT32),
    _T.TYPE_INT64: lambda: _integers(*_INT64),
    _T.TYPE_SINT64: lambda: _integers(*_INT64),
    _T.TYPE_SFIXED64: lambda: _integers(*_INT64),
    _T.TYPE_UINT32: lambda: _integers(0, 2**32 - 1),
    _T.TYPE_FIXED32: lambda: _integers(0, 2**32 - 1),
    _T.TYPE_UINT64: lambda: _integers(0, 2**64 - 1),
    _T.TYPE_FIXED64: lambda: _integers(0, 2**64 - 1),
    _T.TYPE_DOUBLE: lambda: st.floats(),
    _T.TYPE_FLOAT: lambda: st.floats(width=32),
    _T.TYPE_BOOL: st.booleans,
    _T.TYPE_STRING: text,
    _T.TYPE_BYTES: binary,
}


def _single(field: FieldDescriptor, hints: Hints, depth: int) -> st.SearchStrategy[Any]:
    """One value of ``field`` (one element, for a repeated field)."""
    if field.type == _T.TYPE_ENUM:
        named = [v.number for v in field.enum_type.values]
        drawn: st.SearchStrategy[Any] = st.one_of(st.sampled_from(named), _integers(*_INT32))
    elif field.type == _T.TYPE_MESSAGE:
        drawn = messages(field.message_type, hints, depth + 1)
    else:
        drawn = _SCALARS[field.type]()
    hint = hints.get(field.name)
    return drawn if hint is None else st.one_of(hint, drawn)


def value(
    field: FieldDescriptor, hints: Hints = NO_HINTS, depth: int = 0
) -> st.SearchStrategy[Any]:
    """A whole value of ``field``: a list for a repeated field, a dict for a map."""
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        key, val = entry.fields_by_name["key"], entry.fields_by_name["value"]
        return st.dictionaries(
            _single(key, hints, depth), _single(val, hints, depth), max_size=MAX_ITEMS
        )
    if field.is_repeated:
        return st.lists(_single(field, hints, depth), max_size=MAX_ITEMS)
    return _single(field, hints, depth)


def assign(msg: Message, field: FieldDescriptor, drawn: Any) -> None:
    """Sets ``field`` of ``msg`` to ``drawn`` (a value of ``value(field)``), replacing it."""
    name = field.name
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        target = getattr(msg, name)
        target.clear()
        for k, v in drawn.items():
            if isinstance(v, Message):
                target[k].CopyFrom(v)
            else:
                target[k] = v
    elif field.is_repeated:
        target = getattr(msg, name)
        del target[:]
        if field.type == _T.TYPE_MESSAGE:
            for item in drawn:
                target.add().CopyFrom(item)
        else:
            target.extend(drawn)
    elif field.type == _T.TYPE_MESSAGE:
        getattr(msg, name).CopyFrom(drawn)
    else:
        setattr(msg, name, drawn)


def messages(
    descriptor: Descriptor, hints: Hints = NO_HINTS, depth: int = 0
) -> st.SearchStrategy[Message]:
    """Any ``descriptor`` message (see the module docstring)."""
    cls = GetMessageClass(descriptor)
    if descriptor.full_name == "google.protobuf.Timestamp":
        return _time_like(cls, timestamp_seconds())
    if descriptor.full_name == "google.protobuf.Duration":
        return _time_like(cls, duration_seconds())
    if depth >= MAX_DEPTH:
        return st.just(cls())
    plain: dict[str, st.SearchStrategy[Any]] = {}
    oneofs: list[st.SearchStrategy[tuple[str, Any] | None]] = []
    for oneof in descriptor.oneofs:
        members = [
            st.tuples(st.just(f.name), st.deferred(lambda f=f: value(f, hints, depth)))
            for f in oneof.fields
        ]
        oneofs.append(st.one_of(st.none(), *members))
    for f in descriptor.fields:
        if f.containing_oneof is None:
            plain[f.name] = st.deferred(lambda f=f: value(f, hints, depth))

    def build(fields: dict[str, Any], chosen: tuple[tuple[str, Any] | None, ...]) -> Message:
        msg = cls()
        for name, drawn in [*fields.items(), *(c for c in chosen if c is not None)]:
            assign(msg, descriptor.fields_by_name[name], drawn)
        return msg

    return st.builds(build, st.fixed_dictionaries({}, optional=plain), st.tuples(*oneofs))


def field_paths(descriptor: Descriptor, depth: int = 0) -> list[tuple[FieldDescriptor, ...]]:
    """Every field of ``descriptor`` at any depth, as the path of fields leading to it
    (Timestamp and Duration are leaves: their own fields are drawn together)."""
    paths: list[tuple[FieldDescriptor, ...]] = []
    for f in descriptor.fields:
        paths.append((f,))
        sub = f.message_type
        if (
            sub is not None
            and not f.is_repeated
            and not sub.full_name.startswith("google.protobuf.")
            and depth < MAX_DEPTH
        ):
            paths.extend((f, *rest) for rest in field_paths(sub, depth + 1))
    return paths


def mutated(base: Message, hints: Hints = NO_HINTS) -> st.SearchStrategy[Message]:
    """``base`` with one field, anywhere in it, set to a drawn value."""
    paths = field_paths(base.DESCRIPTOR)

    def with_value(path: tuple[FieldDescriptor, ...]) -> st.SearchStrategy[Message]:
        def apply(drawn: Any) -> Message:
            msg = type(base)()
            msg.CopyFrom(base)
            parent = msg
            for f in path[:-1]:
                parent = getattr(parent, f.name)
            assign(parent, path[-1], drawn)
            return msg

        return value(path[-1], hints).map(apply)

    return st.sampled_from(paths).flatmap(with_value)


def with_bad_utf8(msg: Message, marker: str) -> bytes:
    """``msg`` serialized, with the string ``marker`` (set in one of its string fields)
    turned into bytes that are not UTF-8."""
    data = msg.SerializeToString()
    raw = marker.encode()
    assert raw in data, f"{marker!r} is not in the message"
    return data.replace(raw, b"\xff" + raw[1:-1] + b"\xc3", 1)
