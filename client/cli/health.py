"""A job's health as ``shardcron job list`` prints it: its last runs as a strip of
characters, oldest first (``✓`` succeeded, ``✗`` failed, timed out or missed, ``▸`` on
its way, ``·`` cancelled or skipped), and its success rate (``JobHealth``).

A terminal whose encoding is not UTF-8 gets the ASCII strip (``+``, ``x``, ``>``,
``.``); ``--json`` gives the runs themselves with the counts and the rate.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from shardcron.client.types import JobHealth, RunState

_FAILED = frozenset({RunState.FAILED, RunState.TIMED_OUT, RunState.MISSED})
_ON_ITS_WAY = frozenset({RunState.PENDING, RunState.LEASED, RunState.RUNNING})
UNICODE_MARKS = ("✓", "✗", "▸", "·")  # succeeded, failed, on its way, neither
ASCII_MARKS = ("+", "x", ">", ".")


def speaks_utf8(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stdout by default) encodes UTF-8."""
    encoding = getattr(stream or sys.stdout, "encoding", None) or ""
    return encoding.lower().replace("-", "").replace("_", "") == "utf8"


def strip(health: JobHealth, *, unicode: bool) -> str:
    """The runs of ``health``, oldest first, one character each."""
    ok, bad, going, other = UNICODE_MARKS if unicode else ASCII_MARKS
    marks = []
    for run in reversed(health.runs):
        if run.state is RunState.SUCCEEDED:
            marks.append(ok)
        elif run.state in _FAILED:
            marks.append(bad)
        elif run.state in _ON_ITS_WAY:
            marks.append(going)
        else:
            marks.append(other)
    return "".join(marks)


def rate_text(health: JobHealth) -> str:
    """The success rate in whole percent, with what it is over: ``85% of 20``; ``-``
    when no run is rated."""
    rate = health.success_rate
    return "-" if rate is None else f"{round(rate * 100)}% of {health.rated}"


def health_json(health: JobHealth | None, plain: dict[str, Any] | None) -> dict[str, Any] | None:
    """``plain`` (the health as ``to_jsonable`` made it) with its counts and rate."""
    if health is None or plain is None:
        return plain
    return {
        **plain,
        "succeeded": health.succeeded,
        "rated": health.rated,
        "success_rate": health.success_rate,
    }
