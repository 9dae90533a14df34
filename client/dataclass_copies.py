"""``copy_with``: ``dataclasses.replace`` for the domain's frozen, slotted dataclasses,
without its per-call introspection; ``fast_init``: their ``__init__``, setting each slot
through its descriptor.

A run is copied several times on its way through the poller (leased, sent, started,
ended), each copy of a 23-field ``Run``; ``dataclasses.replace`` spends most of its
time looking up fields and calling the frozen ``__init__``, which sets each field
through ``object.__setattr__``. ``copy_with`` builds, once per class, a function that
sets every slot of the new object straight from the old one or from the changes.

It gives exactly what ``replace`` gives for classes without ``__post_init__`` (the
domain's have none: they are checked at the edge, not on construction); a class
with one is copied by ``replace``, so its checks still run. An unknown field name
raises ``TypeError``, as ``replace`` does.

``fast_init`` gives a class the ``__init__`` ``dataclass`` would (the same keyword-only
parameters, defaults and default factories) setting each slot through its descriptor,
for the classes made once or more per job (runs, jobs, leases, results). A class it
cannot do that for exactly (``__post_init__``, fields outside ``__init__``, positional
parameters) keeps its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_UNSET = object()  # a field the caller did not change; in __init__, one to default
_COPIERS: dict[type, Callable[..., Any]] = {}


def copy_with(obj: T, /, **changes: Any) -> T:
    """A copy of the frozen dataclass ``obj`` with ``changes`` applied."""
    copier = _COPIERS.get(type(obj))
    if copier is None:
        copier = _COPIERS[type(obj)] = _copier(type(obj))
    return copier(obj, **changes)  # type: ignore[no-any-return]


def _copier(cls: type) -> Callable[..., Any]:
    if hasattr(cls, "__post_init__") or not hasattr(cls, "__slots__"):
        return lambda obj, /, **changes: dataclasses.replace(obj, **changes)
    # names of the function's own start with "_": no field name does (checked)
    names = [f.name for f in dataclasses.fields(cls)]
    if any(n.startswith("_") for n in names):
        return lambda obj, /, **changes: dataclasses.replace(obj, **changes)
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_unset": _UNSET}
    params = ", ".join(f"{n}=_unset" for n in names)
    lines = [f"def _copy(_obj, /, *, {params}):", "    _made = _new(_cls)"]
    for n in names:
        scope[f"_set_{n}"] = getattr(cls, n).__set__  # the slot's own descriptor
        lines.append(f"    _set_{n}(_made, _obj.{n} if {n} is _unset else {n})")
    lines.append("    return _made")
    exec("\n".join(lines), scope)  # noqa: S102 - source built from field names only
    return scope["_copy"]  # type: ignore[no-any-return]


def fast_init(cls: type[T]) -> type[T]:
    """``cls`` with the faster ``__init__`` (module docstring); a class decorator."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if (
        hasattr(cls, "__post_init__")
        or not hasattr(cls, "__slots__")
        or any(not f.init or not f.kw_only or f.name.startswith("_") for f in fields)
        or len(fields) != len(getattr(cls, "__dataclass_fields__", ()))  # InitVar
    ):
        return cls
    scope: dict[str, Any] = {"_unset": _UNSET}
    params, body = [], []
    for f in fields:
        n = f.name
        scope[f"_set_{n}"] = getattr(cls, n).__set__
        if f.default is not dataclasses.MISSING:
            scope[f"_default_{n}"] = f.default
            params.append(f"{n}=_default_{n}")
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"_factory_{n}"] = f.default_factory
            params.append(f"{n}=_unset")
            body.append(f"    if {n} is _unset: {n} = _factory_{n}()")
        else:
            params.append(n)
        body.append(f"    _set_{n}(self, {n})")
    lines = [f"def __init__(self, *, {', '.join(params)}) -> None:", *body]
    exec("\n".join(lines), scope)  # noqa: S102 - source built from field names only
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[misc]
    return cls
