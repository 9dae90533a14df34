"""Handler registry: Python callables a worker serves by name, plus the built-ins.

A handler is ``def h(ctx: HandlerContext) -> bytes | str | None`` or the same as
``async def``. Register with ``@shardcron.worker.handler("name")`` (the module-level
default registry) or on your own ``HandlerRegistry``: at most ``MAX_WORKER_HANDLERS``
names of ``MAX_HANDLER_NAME`` characters (``client.limits``: a worker's Hello names
them all). ``load_handler_modules`` imports
modules whose import registers handlers (the CLI's ``--handlers MODULE``), finding them
in the current directory as ``python -m`` would.

The built-ins, served by every worker that uses the default registry (``shardcron dev``
and ``shardcron worker``), are for trying things out:

- ``noop``: succeeds at once;
- ``echo``: succeeds, its payload as its output;
- ``sleep``: sleeps the payload's number of seconds (``2.5``), then succeeds;
- ``fail``: fails (``HANDLER_ERROR``) with the payload as its error.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, overload

from shardcron.client import limits

if TYPE_CHECKING:
    from shardcron.worker.context import HandlerContext

log = logging.getLogger(__name__)

HandlerResult = bytes | str | None
Handler = Callable[["HandlerContext"], HandlerResult | Awaitable[HandlerResult]]


class HandlerRegistry:
    """Handlers by name. ``builtins=True`` starts with noop, echo, sleep and fail."""

    def __init__(self, *, builtins: bool = False) -> None:
        self._handlers: dict[str, Handler] = {}
        if builtins:
            register_builtins(self)

    def register(self, name: str, fn: Handler) -> Handler:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("handler name must be a non-empty string")
        # a worker names every handler in its Hello, which nodes refuse past these
        if len(name) > limits.MAX_HANDLER_NAME:
            raise ValueError(
                f"handler name {limits.clip(name)!r}: at most {limits.MAX_HANDLER_NAME} characters"
            )
        if name not in self._handlers and len(self._handlers) >= limits.MAX_WORKER_HANDLERS:
            raise ValueError(
                f"handler {name!r}: a registry holds at most {limits.MAX_WORKER_HANDLERS} handlers"
            )
        if not callable(fn):
            raise TypeError(f"handler {name!r} is not callable")
        old = self._handlers.get(name)
        if old is not None and old is not fn:
            log.warning("handler %r registered again: the new one replaces the old", name)
        self._handlers[name] = fn
        return fn

    @overload
    def handler(self, name: Handler) -> Handler: ...
    @overload
    def handler(self, name: str | None = None) -> Callable[[Handler], Handler]: ...

    def handler(self, name: Any = None) -> Any:
        """Decorator: ``@reg.handler("name")``, or bare ``@reg.handler`` (the function's name)."""
        if callable(name):
            return self.register(name.__name__, name)

        def decorate(fn: Handler) -> Handler:
            return self.register(name or fn.__name__, fn)

        return decorate

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)


async def _noop(ctx: HandlerContext) -> None:
    return None


async def _echo(ctx: HandlerContext) -> bytes:
    return ctx.payload


async def _sleep(ctx: HandlerContext) -> None:
    text = ctx.payload.decode().strip() or "0"
    await asyncio.sleep(float(text))  # task cancel interrupts it


def _fail(ctx: HandlerContext) -> None:
    raise RuntimeError(ctx.payload.decode(errors="replace") or "failed on purpose")


BUILTINS: dict[str, Handler] = {"noop": _noop, "echo": _echo, "sleep": _sleep, "fail": _fail}


def register_builtins(reg: HandlerRegistry) -> None:
    for name, fn in BUILTINS.items():
        reg.register(name, fn)


registry = HandlerRegistry(builtins=True)
handler = registry.handler


def load_handler_modules(specs: list[str]) -> list[ModuleType]:
    """Import each "pkg.module" (its import registers handlers); a bad name raises ImportError.

    The current directory is searched first, as ``python -m`` does: the ``shardcron``
    program's own ``sys.path`` starts at its script's directory, so without it
    ``--handlers myhandlers`` would not find ``./myhandlers.py``.
    """
    cwd = os.getcwd()
    if any(s.strip() for s in specs) and cwd not in sys.path:
        sys.path.insert(0, cwd)
    modules = []
    for spec in specs:
        name = spec.strip()
        if not name:
            continue
        try:
            modules.append(importlib.import_module(name))
        except ImportError as e:
            raise ImportError(f"cannot import handler module {name!r}: {e}") from e
    return modules
