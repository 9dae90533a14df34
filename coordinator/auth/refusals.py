"""The audit of refused credentials: one line per call that ``authorize`` refused.

Every call refused UNAUTHENTICATED (no credential, a malformed one, a token or
certificate no principal has) or PERMISSION_DENIED (a role or owner that does not
allow it; a lease stream whose principal a reload removed or changed), on any service
and over gRPC or HTTP, is ``refused`` here, which

- counts it, by method and code, in what ``count_into`` was given (the node's
  ``shardcron_auth_refusals_total``): every refusal, however many;
- logs one JSON line on the ``shardcron.audit`` logger, at WARNING: ``at``,
  ``principal`` (the principal the credential identified, ``"anonymous"`` when none
  was), ``method`` (the full gRPC name: an HTTP route's is the method it serves),
  ``peer`` (the caller's host, without its port), ``outcome`` (the code's name) and
  ``reason`` (the refusal's message). Never the credential: not the token nor any
  part of it, not the ``authorization`` header; the messages ``authorize`` raises
  name neither.

The lines are bounded per peer host, so a client hammering a node with bad tokens
costs it a few lines a second, not a line a call: at most ``lines_per_window`` lines
per ``window`` seconds for each host. The refusals past that are counted, and the
count is logged as one ``"outcome":"SUPPRESSED"`` line for that host (with
``suppressed``: how many) at its next refusal once the window ended, or at the first
refusal from anyone a window later (``flush``). At most ``max_peers`` hosts are
tracked at once; the hosts past that share one budget (their lines name each, their
SUPPRESSED line names peer ``"*"``).

It runs on the event loop alone (gRPC's asyncio server and the HTTP server share it),
so it holds no lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardcron.client.errors import PermissionDenied, ShardcronError, Unauthenticated
from shardcron.client.limits import clip
from shardcron.coordinator.audit import ANONYMOUS, emit
from shardcron.coordinator.auth.authorize import PrincipalDenied
from shardcron.coordinator.ids import utcnow

LINES_PER_WINDOW = 10
WINDOW_SECONDS = 1.0
MAX_PEERS = 1024
MAX_REASON = 500  # characters of a refusal's message logged
OVERFLOW_PEER = "*"  # the hosts past ``max_peers``, on one budget

Count = Callable[[str, str], None]  # (method, code)


def is_refusal(error: BaseException) -> bool:
    """``error`` refuses a credential: UNAUTHENTICATED or PERMISSION_DENIED."""
    return isinstance(error, Unauthenticated | PermissionDenied)


def peer_host(peer: str | None) -> str:
    """The host of a gRPC peer (``ipv4:10.0.0.5:51234``, ``ipv6:[::1]:51234``) or of an
    HTTP remote address (``10.0.0.5``): the address without its scheme and port."""
    if not peer:
        return "unknown"
    scheme, colon, rest = peer.partition(":")
    if colon and scheme in ("ipv4", "ipv6"):
        host, _, port = rest.rpartition(":")
        return host if host and port.isdigit() else rest
    return peer


@dataclass(slots=True, kw_only=True)
class _Window:
    """One host's lines in the window that began at ``start`` (monotonic seconds)."""

    start: float
    logged: int = 0
    suppressed: int = 0


class RefusalAudit:
    """Counts every refused call and logs it within the per-host bound (module docstring)."""

    def __init__(
        self,
        *,
        lines_per_window: int = LINES_PER_WINDOW,
        window: float = WINDOW_SECONDS,
        max_peers: int = MAX_PEERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lines_per_window = lines_per_window
        self.window = window
        self.max_peers = max_peers
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._next_flush = -float("inf")
        self._counts: list[Count] = []

    def count_into(self, count: Count) -> None:
        """Calls ``count(method, code)`` for every refusal from now on."""
        self._counts.append(count)

    def refused(self, *, method: str, peer: str | None, error: ShardcronError) -> None:
        """Records that ``method``, called from ``peer``, was refused with ``error``."""
        code = error.code
        for count in self._counts:
            count(method, code)
        now = self._clock()
        if now >= self._next_flush:
            self.flush()
        host = peer_host(peer)
        window = self._window_of(host, now)
        if window.logged >= self.lines_per_window:
            window.suppressed += 1
            return
        window.logged += 1
        self._log(
            principal=error.principal if isinstance(error, PrincipalDenied) else ANONYMOUS,
            method=method,
            peer=host,
            outcome=code,
            reason=clip(error.message, MAX_REASON),
        )

    def flush(self) -> None:
        """Logs the suppressed count of every host whose window ended, and forgets it."""
        now = self._clock()
        self._next_flush = now + self.window
        for host, window in list(self._windows.items()):
            if now >= window.start + self.window:
                del self._windows[host]
                self._summarize(host, window)

    def _window_of(self, host: str, now: float) -> _Window:
        """The window ``host``'s line counts in (``OVERFLOW_PEER``'s past ``max_peers``)."""
        if host not in self._windows and len(self._windows) >= self.max_peers:
            host = OVERFLOW_PEER
        window = self._windows.get(host)
        if window is not None and now >= window.start + self.window:
            self._summarize(host, window)
            window = None
        if window is None:
            window = self._windows[host] = _Window(start=now)
        return window

    def _summarize(self, host: str, window: _Window) -> None:
        if window.suppressed:
            self._log(
                method="*",
                peer=host,
                outcome="SUPPRESSED",
                suppressed=window.suppressed,
                reason=f"{window.suppressed} more refusals in {self.window:g} s were not logged",
            )

    @staticmethod
    def _log(**fields: Any) -> None:
        emit({"at": utcnow().isoformat(), **fields}, logging.WARNING)
