"""As whom, and where, a worker's commands run: a user per owner, and a private
directory per run.

- ``RunUsers``: the worker's own user (``OwnUser``: the default of ``shardcron
  worker``); one fixed user (``FixedUser``, ``--run-as USER``); or a uid of its own for
  each owner out of a range (``OwnerUids``, ``--run-as-range A-B``, the default of
  ``shardcron dev`` as root). An owner's uid is stable on the host: it is kept in a
  map file beside the runs' directories (``uids``, a line ``UID "OWNER"`` each),
  appended under a lock, so every worker of the host sharing the run directory agrees.
  The first choice is the owner's hash within the range, then the next uid not taken.
  Its gid is the same number, with no supplementary groups. Switching users needs
  root.
- ``RunDirs``: the runs' private directories, ``<run dir>/<worker subtree>/<run>``:
  the run directory and each worker's subtree are the worker's, 0711 (a run reaches
  its own directory by name and lists nothing); a run's own is 0700 and its user's,
  made and removed by its supervisor. ``sweep`` removes the subtrees of workers that
  died.
- ``readable_by_others``: whether a file (a key, an auth file, a token) can be read by
  a user that is neither its owner nor in its group, as the runs' users are.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import pwd
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .containment.hosts import subtree_worker_alive
from .containment.run_home import remove_tree

log = logging.getLogger(__name__)

UID_MAP = "uids"  # in the run directory
SYSTEM_RUN_DIR = "/var/lib/shardcron/runs"  # a root worker's default
MAX_UID = (1 << 32) - 2  # (uid_t)-1 means "no change" to setuid


@dataclass(frozen=True, slots=True)
class RunUser:
    uid: int
    gid: int


class RunUsers(Protocol):
    """Who runs an owner's commands."""

    separate: bool  # owners' commands run as users other than the worker's

    def user_for(self, owner: str) -> RunUser | None:
        """The user to run ``owner``'s command as; None: the worker's own."""
        ...

    def describe(self) -> str: ...


class OwnUser:
    """Every command runs as the worker's own user."""

    separate = False

    def user_for(self, owner: str) -> RunUser | None:
        return None

    def describe(self) -> str:
        return f"as this worker's own user (uid {os.geteuid()}): runs of different owners are not kept apart"


class FixedUser:
    """Every command runs as one user (``--run-as USER``): apart from the worker, not
    from each other."""

    separate = True

    def __init__(self, name: str) -> None:
        try:
            entry = pwd.getpwnam(name) if not name.isdigit() else pwd.getpwuid(int(name))
        except KeyError as e:
            raise ValueError(f"no user {name!r} on this host") from e
        if entry.pw_uid == 0:
            raise ValueError("root would not keep commands apart from anything")
        self.user = RunUser(uid=entry.pw_uid, gid=entry.pw_gid)
        self.name = entry.pw_name

    def user_for(self, owner: str) -> RunUser | None:
        return self.user

    def describe(self) -> str:
        return f"as user {self.name} (uid {self.user.uid}), apart from this worker, not from each other"


def parse_uid_range(text: str) -> tuple[int, int]:
    """``A-B`` as (A, B); ValueError saying what is wrong."""
    first, sep, last = text.partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise ValueError(f"{text!r} is not FIRST-LAST, e.g. 200000-265535")
    a, b = int(first), int(last)
    if not 0 < a <= b <= MAX_UID:
        raise ValueError(f"{text!r}: need 0 < FIRST <= LAST <= {MAX_UID}")
    return a, b


class OwnerUids:
    """A uid of its own for each owner, out of ``first``..``last`` (module docstring)."""

    separate = True

    def __init__(self, first: int, last: int, map_path: Path) -> None:
        self.first, self.last = first, last
        self.map_path = map_path
        self._known: dict[str, int] = {}

    def describe(self) -> str:
        return (
            f"as a uid of its own for each owner, from {self.first}-{self.last} "
            f"(kept in {self.map_path})"
        )

    def user_for(self, owner: str) -> RunUser | None:
        uid = self._known.get(owner)
        if uid is None:
            uid = self._known[owner] = self._allocate(owner)
        return RunUser(uid=uid, gid=uid)

    def _allocate(self, owner: str) -> int:
        """The owner's uid from the map file, or a new one appended to it, under an
        exclusive lock (other workers of the host share the file)."""
        fd = os.open(self.map_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            taken: dict[int, str] = {}
            with open(fd, encoding="utf-8", closefd=False) as f:
                f.seek(0)
                for line in f:
                    uid, _, name = line.rstrip("\n").partition(" ")
                    if uid.isdigit() and name:
                        taken[int(uid)] = json.loads(name)
            self._known.update({name: uid for uid, name in taken.items()})
            if owner in self._known:
                return self._known[owner]
            size = self.last - self.first + 1
            digest = int.from_bytes(hashlib.sha256(owner.encode()).digest()[:8], "big")
            for step in range(size):
                uid = self.first + (digest + step) % size
                if uid not in taken:
                    os.write(fd, f"{uid} {json.dumps(owner)}\n".encode())
                    os.fsync(fd)
                    return uid
            raise OSError(f"every uid of {self.first}-{self.last} is taken by another owner")
        finally:
            os.close(fd)  # and the lock with it


def default_run_dir() -> Path:
    if os.geteuid() == 0:
        return Path(SYSTEM_RUN_DIR)
    return Path(tempfile.gettempdir()) / f"shardcron-runs-{os.geteuid()}"


class RunDirs:
    """The private directories of one worker's runs (module docstring)."""

    def __init__(self, root: Path, subtree: str) -> None:
        self.root = root
        self.subtree = subtree

    @property
    def base(self) -> Path:
        return self.root / self.subtree

    def home(self, name: str) -> str:
        return str(self.base / name)

    def prepare(self) -> None:
        """Makes the run directory (checked: this user's, writable by no one else) and
        this worker's subtree in it."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(f"{self.root} is not a directory of this user's")
        if st.st_mode & 0o022:
            raise OSError(f"{self.root} may be written by others: chmod go-w {self.root}")
        os.chmod(self.root, 0o711)
        self.base.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.base, 0o711)

    def sweep(self) -> list[str]:
        """Removes the subtrees of workers that died; their names."""
        swept = []
        for entry in os.scandir(self.root):
            if entry.is_dir(follow_symlinks=False) and not subtree_worker_alive(entry.name):
                try:
                    remove_tree(entry.path)
                    swept.append(entry.name)
                except OSError as e:
                    log.warning("cannot remove %s, left by a worker that died: %s", entry.path, e)
        return swept

    def close(self) -> None:
        try:
            self.base.rmdir()
        except OSError:
            pass  # a supervisor still finishing: the next sweep removes it


def readable_by_others(path: str | Path) -> bool:
    """Whether a user that is neither the file's owner nor in its group may read it: it
    has the read bit for others, and every directory above it the search bit."""
    p = Path(path).resolve()
    if not p.stat().st_mode & stat.S_IROTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in p.parents)
