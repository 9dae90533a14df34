"""How the deploy package reports: progress lines on stderr and the one error it raises.

Progress goes to stderr so that stdout carries only a command's answer (a connect
string, contact points, a jar directory).
"""

from __future__ import annotations

import sys


def log(message: str) -> None:
    """One progress line on stderr."""
    print(f"[deploy] {message}", file=sys.stderr, flush=True)


class ServerError(RuntimeError):
    """A server could not be fetched, started or health-checked."""
