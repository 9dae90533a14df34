"""Requests that do not decode get INVALID_ARGUMENT naming the field, not UNKNOWN.

gRPC deserializes a request before any servicer runs, and a ``DecodeError`` there (a
string field holding invalid UTF-8, a truncated message) reached the caller as
UNKNOWN "Unexpected <class 'DecodeError'>". ``DecodingInterceptor`` takes the
deserializer out of every method handler, so gRPC hands the raw bytes on, and decodes
them itself in front of the servicer: a request (or a message of a request stream)
that does not decode ends the call with INVALID_ARGUMENT, naming the string field
with the bad UTF-8 when there is one (``spec.task.command.argv[1]: not valid UTF-8``).

A message of a request stream that does not decode is raised as ``RequestNotDecoded``
to whoever reads the stream, and the call is ended from the servicer's own task: a
servicer may read its requests in a task of its own (the lease stream does) while it
writes answers, and ending the call from that task races the write and can lose the
status, leaving the caller waiting until its deadline.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from shardcron.client.errors import InvalidArgument
from shardcron.coordinator.interceptors import BehaviorInterceptor

Deserializer = Callable[[bytes], Any]

# wire types of the protobuf encoding
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def bad_utf8_field(descriptor: Descriptor, data: bytes, path: str = "") -> str | None:
    """The path of the first string field of ``data`` (a ``descriptor`` message) whose
    bytes are not UTF-8 (``spec.task.command.argv[1]``, ``spec.labels`` for a map), or
    None when there is none or the bytes are not a message at all."""
    seen: dict[int, int] = {}
    pos = 0
    try:
        while pos < len(data):
            tag, pos = _varint(data, pos)
            number, wire = tag >> 3, tag & 7
            if wire == _VARINT:
                _, pos = _varint(data, pos)
            elif wire == _FIXED64:
                pos += 8
            elif wire == _FIXED32:
                pos += 4
            elif wire == _LENGTH_DELIMITED:
                size, pos = _varint(data, pos)
                chunk, pos = data[pos : pos + size], pos + size
                found = _bad_in_field(descriptor.fields_by_number.get(number), chunk, path, seen)
                if found:
                    return found
            else:
                return None
    except ValueError:
        return None
    return None


def _bad_in_field(
    field: FieldDescriptor | None, chunk: bytes, path: str, seen: dict[int, int]
) -> str | None:
    if field is None:
        return None
    name = f"{path}.{field.name}" if path else field.name
    index = seen.get(field.number, 0)
    seen[field.number] = index + 1
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return name if bad_utf8_field(field.message_type, chunk, "") else None
    if field.is_repeated:
        name = f"{name}[{index}]"
    if field.type == FieldDescriptor.TYPE_STRING:
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            return name
        return None
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return bad_utf8_field(field.message_type, chunk, name)
    return None


class RequestNotDecoded(InvalidArgument):
    """A request, or a message of a request stream, that does not decode."""


def _decoding_failure(deserializer: Deserializer, raw: bytes) -> RequestNotDecoded:
    """What is wrong with ``raw``, which ``deserializer`` refused."""
    message_class = getattr(deserializer, "__self__", None)
    descriptor = getattr(message_class, "DESCRIPTOR", None)
    if isinstance(descriptor, Descriptor):
        field = bad_utf8_field(descriptor, raw)
        if field:
            return RequestNotDecoded(field, "not valid UTF-8")
        return RequestNotDecoded("request", f"not a valid {descriptor.full_name} message")
    return RequestNotDecoded("request", "not a valid message")


def _decoded(deserializer: Deserializer, raw: bytes) -> Any:
    try:
        return deserializer(raw)
    except (DecodeError, ValueError, UnicodeDecodeError):
        raise _decoding_failure(deserializer, raw) from None


async def _decode(deserializer: Deserializer, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
    try:
        return _decoded(deserializer, raw)
    except RequestNotDecoded as e:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)


def _decoded_stream(
    deserializer: Deserializer, raw: AsyncIterator[bytes], context: grpc.aio.ServicerContext
) -> AsyncIterator[Any]:
    """The messages of ``raw`` decoded. One that does not decode is raised to the reader
    and sets the call's status, which the call ends with even if the servicer then
    returns normally (a reader task of its own may swallow the error)."""

    async def messages() -> AsyncIterator[Any]:
        async for item in raw:
            try:
                yield _decoded(deserializer, item)
            except RequestNotDecoded as e:
                context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
                context.set_details(e.message)
                raise

    return messages()


def _unary_request(behavior: Callable[..., Any], deserializer: Deserializer) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):

        async def streaming(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            request = await _decode(deserializer, raw, context)
            async for item in behavior(request, context):
                yield item

        return streaming

    async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        return await behavior(await _decode(deserializer, raw, context), context)

    return unary


def _stream_request(behavior: Callable[..., Any], deserializer: Deserializer) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):

        async def streaming(raw: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
            try:
                async for item in behavior(_decoded_stream(deserializer, raw, context), context):
                    yield item
            except RequestNotDecoded as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)

        return streaming

    async def unary(raw: AsyncIterator[bytes], context: Any) -> Any:
        try:
            return await behavior(_decoded_stream(deserializer, raw, context), context)
        except RequestNotDecoded as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)

    return unary


class DecodingInterceptor(BehaviorInterceptor):
    """Decodes every request in front of its servicer; see the module docstring."""

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]
    ) -> Callable[..., Any] | None:
        deserializer = getattr(handler, "request_deserializer", None)
        if deserializer is None:
            return None
        wrap = _stream_request if handler.request_streaming else _unary_request
        return wrap(behavior, deserializer)

    def replaced(
        self, handler: grpc.RpcMethodHandler, kind: str, behavior: Callable[..., Any]
    ) -> grpc.RpcMethodHandler:
        # the behaviour takes the bytes: gRPC no longer deserializes them
        return handler._replace(request_deserializer=None, **{kind: behavior})  # type: ignore[attr-defined,no-any-return]
