"""What the containment tests need of the host, and what they share with commands.

``CGROUP_KIND`` is the cgroup containment this host gives a worker ("cgroup-v2" or
"cgroup-v1"), or None with ``NO_CGROUPS`` saying why; ``needs_cgroups`` and
``needs_root`` skip a test with that reason where the host lacks them (CI has both).
``shared_dir`` makes a directory a command running as another user may write in: a
test that must share a path with such a command (to learn its pid) uses one, and says
so. ``ESCAPEES`` is a command that starts two processes that leave its process group
and session (``setsid``, a double fork) and writes their pids to a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shardcron.worker.containment.hosts import choose, worker_subtree


def _cgroup_kind() -> tuple[str | None, str]:
    try:
        found, passed_over = choose("auto", worker_subtree("tests-probe"))
    except OSError as e:
        return None, str(e)
    found.close()
    if found.enforced:
        return found.kind, ""
    return None, "no writable cgroup hierarchy: " + "; ".join(passed_over)


CGROUP_KIND, NO_CGROUPS = _cgroup_kind()
needs_cgroups = pytest.mark.skipif(CGROUP_KIND is None, reason=NO_CGROUPS)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A world-writable, sticky directory outside pytest's own (which only its user may
    enter), removed after."""
    path = Path(tempfile.mkdtemp(prefix="shardcron-shared-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        for p in sorted(path.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() else p.rmdir()
        path.rmdir()


def escapees(pidfile: Path) -> str:
    """A command (``sh -c`` text) that starts two processes that escape its process
    group and session, each writing its pid to ``pidfile``, then sleeps."""
    record = f"echo $$ >> {pidfile}; exec sleep 600"
    return (
        f"setsid sh -c '{record}' & "  # a session of its own
        f"sh -c \"sh -c '{record}' &\"; "  # a double fork: its parent exits at once
        "sleep 600"
    )


def read_pids(pidfile: Path, count: int) -> list[int] | None:
    """The ``count`` pids written to ``pidfile``, once they all are."""
    if not pidfile.exists():
        return None
    pids = [int(line) for line in pidfile.read_text().split()]
    return pids if len(pids) >= count else None
