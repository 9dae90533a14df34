"""A run's artifact unpacked into its directory, by its supervisor, before its command.

The archive (checked entry by entry by the node before it was stored, and by digest
by the worker before it is handed here) is unpacked into ``HOME/work`` with Python's
extraction filter ``data``: nothing lands outside that directory, no link leads out
of it, no device or pipe is made, no setuid bit is kept, and files get the unpacking
user as their owner. When the run has a user of its own, a child that has become
that user unpacks it (the archive opened by the supervisor first, so the run's user
needs no access to the worker's cache): the tree is the run's from the start, as if
its command had made it, and the unpacking has no more rights than the command.
"""

from __future__ import annotations

import bz2  # noqa: F401
import gzip  # noqa: F401
import lzma  # noqa: F401
import os
import tarfile

# The decompressors above are imported here, before any fork, because ``tarfile`` imports
# them only when it meets a compressed archive: by then the child unpacking may be the
# run's user, who may not be allowed to read Python's library.

WORK_DIR = "work"  # below the run's directory: where its artifact is unpacked


def unpack(archive: str, home: str, uid: int | None, gid: int | None) -> str:
    """Unpacks ``archive`` into ``home/work`` as ``uid``/``gid`` (None: this process's
    user) and returns that directory; ``OSError`` saying why it could not."""
    dest = f"{home}/{WORK_DIR}"
    fd = os.open(archive, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        if uid is None:
            _extract(fd, dest)
        else:
            _extract_as(fd, dest, uid, gid)
    finally:
        os.close(fd)
    return dest


def _extract(fd: int, dest: str) -> None:
    os.mkdir(dest, 0o700)
    with os.fdopen(os.dup(fd), "rb") as f, tarfile.open(fileobj=f, mode="r:*") as tar:
        try:
            tar.extractall(dest, filter="data")
        except (tarfile.TarError, EOFError) as e:
            raise OSError(0, f"{type(e).__name__}: {e}") from e


def _extract_as(fd: int, dest: str, uid: int, gid: int | None) -> None:
    """``_extract`` in a child that is the run's user; its failure told through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid if gid is not None else uid)
            os.setuid(uid)
            _extract(fd, dest)
            status = 0
        except BaseException as e:  # the child reports everything, and always exits
            os.write(w, (getattr(e, "strerror", None) or str(e) or type(e).__name__).encode())
        finally:
            os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as report:
        why = report.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise OSError(0, why or f"the unpacking process ended with status {status}")
