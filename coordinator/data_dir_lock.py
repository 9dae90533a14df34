"""The lock that keeps a data directory to one process.

Two ``shardcron dev`` on one data directory would both own every shard and run every
run twice. What it guarantees:

- ``lock_data_dir`` takes an exclusive ``flock`` on ``<data dir>/lock`` without
  waiting, and writes the holder's pid in it; the lock is held for as long as the
  returned ``DataDirLock`` is open (the process's life, for the program);
- the kernel drops the lock when the process dies, however it dies (SIGKILL too), so a
  stale lock file never keeps the next process out: the file's content is only
  informative;
- the descriptor is not inherited by child processes (commands a worker runs, its
  fork server and their supervisors), so none of them can keep the lock after its
  holder died;
- a second process gets ``DataDirInUse`` naming the holder's pid, before it has
  opened the store or served anything.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE_NAME = "lock"


class DataDirInUse(Exception):
    """Another live process holds the data directory's lock."""

    def __init__(self, data_dir: Path, holder_pid: int | None) -> None:
        self.data_dir = data_dir
        self.holder_pid = holder_pid
        holder = f"pid {holder_pid}" if holder_pid is not None else "a process (pid unknown)"
        super().__init__(
            f"data directory {data_dir} is in use by {holder}; "
            "one process per data directory (stop it, or give another --data-dir)"
        )


class DataDirLock:
    """A held data-directory lock; ``release`` (or the process's end) gives it back."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def lock_data_dir(data_dir: Path) -> DataDirLock:
    """Locks ``data_dir`` (created if missing) for this process; raises ``DataDirInUse``
    at once, naming the holder's pid, if another process holds it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_FILE_NAME
    # os.open descriptors are non-inheritable (PEP 446): children never hold the lock.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise DataDirInUse(data_dir, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    os.fsync(fd)
    return DataDirLock(path, fd)


def _read_pid(fd: int) -> int | None:
    """The pid the holder wrote; None if it has not written it yet."""
    text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
