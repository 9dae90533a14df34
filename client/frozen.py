"""``copy_with``: ``dataclasses.replace`` for the domain's frozen, slotted dataclasses,
at a third of its cost.

A run is copied several times on its way through the poller (leased, sent, started,
ended), each copy of a 23-field ``Run``; ``dataclasses.replace`` spends most of its
time looking up fields and calling the frozen ``__init__``, which sets each field
through ``object.__setattr__``. ``copy_with`` builds, once per class, a function that
sets every slot of the new object straight from the old one or from the changes.

It gives exactly what ``replace`` gives for classes without ``__post_init__`` (the
domain's have none: they are checked at the edge, not on construction); a class
with one is copied by ``replace``, so its checks still run. An unknown field name
raises ``TypeError``, as ``replace`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_UNSET = object()  # a field the caller did not change
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
