"""JSON and proto, both ways, for the HTTP edge: the canonical proto JSON mapping.

A request message is built from three places, merged in this order: the JSON body,
then the path parameters, then the query parameters, each named by the field's JSON
name (``jobId``, ``pageSize``; query aliases such as ``state`` for ``states`` are the
route's). Query values are strings: integers, booleans and enum names are read by the
field's type, and an enum may be named without its prefix (``state=RUNNING`` for
``RUN_STATE_RUNNING``). Anything that does not fit the message is INVALID_ARGUMENT
naming the field, or ``body`` for a body that is not a JSON object of the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import MAX_ERROR_MESSAGE, clip

M = TypeVar("M", bound=Message)

_INTEGER_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
    }
)


def to_json(message: Message) -> dict[str, Any]:
    """The canonical JSON of ``message`` (fields at their default value left out)."""
    return json_format.MessageToDict(message)


def _field(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    for field in descriptor.fields:
        if name in (field.json_name, field.name):
            return field
    return None


def _enum_name(field: FieldDescriptor, name: str, where: str) -> str:
    enum = field.enum_type
    assert enum is not None
    prefix = "_".join(w.upper() for w in _words(enum.name)) + "_"
    for candidate in (name, prefix + name.upper()):
        if candidate in enum.values_by_name:
            return candidate
    names = ", ".join(v.name.removeprefix(prefix) for v in enum.values if v.number)
    raise InvalidArgument(where, f"unknown value {name!r}: one of {names}")


def _words(camel: str) -> list[str]:
    words: list[str] = []
    for ch in camel:
        if ch.isupper() or not words:
            words.append(ch)
        else:
            words[-1] += ch
    return words


def _query_value(field: FieldDescriptor, raw: str, where: str) -> Any:
    if field.type in _INTEGER_TYPES:
        try:
            return int(raw)
        except ValueError:
            raise InvalidArgument(where, f"must be an integer, not {raw!r}") from None
    if field.type == FieldDescriptor.TYPE_BOOL:
        if raw.lower() in ("true", "1", ""):
            return True
        if raw.lower() in ("false", "0"):
            return False
        raise InvalidArgument(where, f"must be true or false, not {raw!r}")
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _enum_name(field, raw, where)
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return raw
    raise InvalidArgument(where, "cannot be given in the query")


def query_fields(
    descriptor: Descriptor, query: Mapping[str, list[str]], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """The query's parameters as JSON fields of the message ``descriptor``."""
    out: dict[str, Any] = {}
    for name, values in query.items():
        field = _field(descriptor, aliases.get(name, name))
        if field is None or field.message_type is not None:
            raise InvalidArgument(name, "not a query parameter of this route")
        converted = [_query_value(field, v, name) for v in values]
        if field.is_repeated:
            out[field.json_name] = converted
        elif len(converted) > 1:
            raise InvalidArgument(name, "given more than once")
        else:
            out[field.json_name] = converted[0]
    return out


def build_request(message_type: type[M], fields: dict[str, Any]) -> M:
    """``message_type`` from its JSON ``fields``. Raises ``InvalidArgument``: whatever
    the JSON holds, the parser's complaint about it is the caller's error."""
    message = message_type()
    try:
        json_format.ParseDict(fields, message)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as e:
        raise InvalidArgument("body", clip(str(e), MAX_ERROR_MESSAGE - 50)) from None
    return message
