"""shardcron.worker: the worker SDK. ``Worker`` runs leased runs; handlers by name.

Example::

    from shardcron.worker import Worker, handler

    @handler("resize")
    def resize(ctx):  # ctx: HandlerContext
        ctx.log("resizing")
        return b"done"

    await Worker("localhost:7070", slots=4).run()
"""

from .executor import (
    CommandExecutor,
    ExecResult,
    Executor,
    HandlerContext,
    HandlerExecutor,
    RunContext,
)
from .handlers import HandlerRegistry, handler, load_handler_modules, registry
from .worker import Worker

__all__ = [
    "CommandExecutor",
    "ExecResult",
    "Executor",
    "HandlerContext",
    "HandlerExecutor",
    "HandlerRegistry",
    "RunContext",
    "Worker",
    "handler",
    "load_handler_modules",
    "registry",
]
