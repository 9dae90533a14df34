"""The gRPC side of authentication: ``AuthInterceptor`` and the reloadable ``AuthSource``.

The interceptor wraps every method handler of a server so that, before the servicer
sees anything, the call is judged by ``authorize`` with its metadata and the subjects
of its verified client certificate (``context.auth_context()``: present only on a TLS
listener that required and verified one). A refused call ends with the error's
status (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT) and reaches no
servicer (a refused credential is audited by ``AuthSource.refusals``, ``refusals``); an accepted one runs with its ``Caller`` set (``current_caller()``) in the
call's own task (gRPC serves each call in a task of its own), and tasks the servicer
starts inherit it.

``AuthSource`` holds the auth file's principals and reads the file again on
``reload()`` (SIGHUP): a file that fails to load is logged and the principals in
force are kept; one that loads is handed to the ``on_reload`` followers (the quotas). A node's own principals (``extra``: the token of ``dev``'s
in-process workers) survive every reload. A call judged before a reload is not
judged again, except the lease stream, which lasts for hours: its servicer asks its
``CallerWatch`` before it sends anything, and ends the stream of a principal a
reload removed or changed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from shardcron.client.codec.errors import status_for
from shardcron.client.errors import ShardcronError
from shardcron.client.types import OWNER_HEADER
from shardcron.coordinator.audit import log_refused_write, owner_named, written_by
from shardcron.coordinator.auth.authorize import Caller, authorize, set_caller, still_allowed
from shardcron.coordinator.auth.principals import (
    AuthFileError,
    AuthTable,
    Principal,
    load_auth_file,
)
from shardcron.coordinator.auth.refusals import RefusalAudit, is_refusal
from shardcron.coordinator.interceptors import BehaviorInterceptor

log = logging.getLogger("shardcron.auth")


class AuthSource:
    """The principals in force: an auth file's, reloaded on demand, plus ``extra``."""

    def __init__(self, path: str | Path, *, extra: Sequence[Principal] = ()) -> None:
        self.path = Path(path)
        self._extra = tuple(extra)
        self.table = self._load()  # raises AuthFileError: a bad file at start is fatal
        self.generation = 0  # bumped by every reload that took effect
        self._followers: list[Callable[[AuthTable], None]] = []
        self.refusals = RefusalAudit()  # every transport's refused credentials, audited
        log.info("auth file %s: %d principals", self.path, len(self.table.principals))

    def _load(self) -> AuthTable:
        table = load_auth_file(self.path)
        for principal in self._extra:
            table = table.with_principal(principal)
        return table

    def watch(self, caller: Caller) -> CallerWatch:
        return CallerWatch(self, caller)

    def on_reload(self, follower: Callable[[AuthTable], None]) -> None:
        """Calls ``follower`` with the new table after each reload that took effect."""
        self._followers.append(follower)

    def reload(self) -> bool:
        """Reads the file again; True if its principals are now in force."""
        try:
            table = self._load()
        except AuthFileError as e:
            log.error("auth file not reloaded, the principals in force are kept: %s", e)
            return False
        self.table = table
        self.generation += 1
        log.info("auth file %s reloaded: %d principals", self.path, len(table.principals))
        for follower in self._followers:
            follower(table)
        return True


class CallerWatch:
    """Whether a long call's caller was removed or changed by a reload since it began."""

    def __init__(self, source: AuthSource, caller: Caller) -> None:
        self._source = source
        self._caller = caller
        self._generation = source.generation

    def revoked(self) -> bool:
        if self._source.generation == self._generation:
            return False
        self._generation = self._source.generation
        return not still_allowed(self._source.table, self._caller)


def cert_subjects(context: grpc.aio.ServicerContext) -> list[str]:
    """The subjects of the client certificate the TLS handshake verified ('' ones left
    out): its full subject, and ``CN=<common name>``."""
    try:
        auth = context.auth_context() or {}
    except Exception:  # a context without TLS support
        return []
    if b"ssl" not in auth.get("transport_security_type", []):
        return []
    subjects = [v.decode("utf-8", "replace") for v in auth.get("x509_subject", [])]
    subjects += [f"CN={v.decode('utf-8', 'replace')}" for v in auth.get("x509_common_name", [])]
    return subjects


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The call's text metadata, lower-case keys, the first value of each."""
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            out.setdefault(key.lower(), value)
    return out


class AuthInterceptor(BehaviorInterceptor):
    """Judges every call with ``authorize`` against ``source``'s principals."""

    def __init__(self, source: AuthSource) -> None:
        self._source = source

    async def _caller(self, method: str, context: grpc.aio.ServicerContext) -> Caller:
        try:
            return authorize(self._source.table, method, _metadata(context), cert_subjects(context))
        except ShardcronError as e:
            if is_refusal(e):
                self._source.refusals.refused(method=method, peer=context.peer(), error=e)
            elif (write := written_by(method)) is not None:  # e.g. a malformed owner header
                log_refused_write(
                    method=write, error=e, owner=owner_named(_metadata(context).get(OWNER_HEADER))
                )
            await context.abort(*status_for(e))
            raise AssertionError("unreachable") from e

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]
    ) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(behavior):

            async def streaming(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                set_caller(await self._caller(method, context))
                async for item in behavior(request, context):
                    yield item

            return streaming

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            set_caller(await self._caller(method, context))
            result = behavior(request, context)
            return await result if inspect.isawaitable(result) else result

        return unary
