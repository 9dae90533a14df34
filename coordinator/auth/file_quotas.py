"""The quotas of an auth file in force on a node: its ``[quota.*]`` tables, read at
start and again on each reload (SIGHUP).

While the auth file holds quota tables they are the node's limits, over
``--quota-file``'s (the ``fallback``); a file without any (or a node without an auth
file) keeps the fallback. A reload that changes the limits restarts the rate buckets
under the new ones (``QuotaGuard.reload``); one that leaves them as they were touches
nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shardcron.coordinator.auth.interceptor import AuthSource
from shardcron.coordinator.auth.principals import AuthTable
from shardcron.coordinator.quotas import QuotaGuard, Quotas


def quotas_in_force(table: AuthTable | None, fallback: Quotas) -> Quotas:
    """The auth file's quotas if it has any, else ``fallback``."""
    return table.quotas if table is not None and table.quotas is not None else fallback


def quota_guard(
    auth: AuthSource | None, fallback: Quotas, count_jobs: Callable[[str], Awaitable[int]]
) -> QuotaGuard:
    """A node's ``QuotaGuard``, kept on the auth file's quotas across reloads."""
    guard = QuotaGuard(quotas_in_force(auth.table if auth else None, fallback), count_jobs)
    if auth is not None:

        def follow(table: AuthTable) -> None:
            quotas = quotas_in_force(table, fallback)
            if quotas != guard.quotas:
                guard.reload(quotas)

        auth.on_reload(follow)
    return guard
