"""A run's private directory: its ``HOME`` when it has a user of its own, with ``tmp``
(its ``TMPDIR``), ``results`` (its ``SHARDCRON_RESULT_DIR``, empty: ``results``) and,
when its job has secrets, ``secrets`` (``SHARDCRON_SECRETS_DIR``: one 0400 file per
secret). Made by the run's supervisor (``supervisor``) 0700 and
given to the run's user last, once everything in it is made; emptied and kept for the
supervisor's next run (``SpareHome``), or removed whatever modes its command left in it
(``remove_tree``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any


def make_home(
    home: str, uid: int | None, gid: int | None, secrets: dict[str, str] | None, spare: SpareHome
) -> None:
    """Makes the run's directory ``home`` (the supervisor's kept one, renamed, if it has
    one), with ``tmp``, an empty ``results`` and the ``secrets`` in it, and gives it to ``uid`` (None: the
    supervisor's own user)."""
    if os.path.lexists(home):  # left by a supervisor of this lease that died
        remove_tree(home)
    if not spare.take(home):
        os.mkdir(home, 0o700)
        os.mkdir(f"{home}/tmp", 0o700)
    os.mkdir(f"{home}/results", 0o700)  # made anew: a kept directory holds only tmp
    made = [home, f"{home}/tmp", f"{home}/results"]
    if secrets:
        made += _write_secrets(f"{home}/secrets", secrets)
    if uid is not None:
        for path in reversed(made):  # the directory itself last
            os.lchown(path, uid, gid if gid is not None else -1)


class SpareHome:
    """The directory of a supervisor's last run, emptied and kept for its next: renamed
    to the next run's name instead of removed and made again (a file system may find a
    new inode slower, right after many were freed, than the spawn of a small command).
    Kept as ``.<cage>`` beside the runs' directories, this process's own, 0700, with
    nothing in it but an empty ``tmp``."""

    def __init__(self) -> None:
        self.path: str | None = None

    def take(self, home: str) -> bool:
        """The kept directory becomes ``home``; False when there is none (or it is gone)."""
        path, self.path = self.path, None
        if path is None:
            return False
        try:
            os.rename(path, home)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                remove_tree(path)
            return False

    def keep(self, home: str, cage: str) -> bool:
        """Empties ``home`` (a run that ended: nothing of it runs) and keeps it; False
        when it cannot be (the caller removes it)."""
        try:
            tmp = f"{home}/tmp"
            for entry in os.scandir(home):
                if entry.path == tmp and entry.is_dir(follow_symlinks=False):
                    for inner in os.scandir(tmp):
                        _remove_entry(inner)
                else:
                    _remove_entry(entry)
            if not os.path.isdir(tmp) or os.path.islink(tmp):
                os.mkdir(tmp, 0o700)
            me, group = os.geteuid(), os.getegid()
            for path in (tmp, home):
                os.lchown(path, me, group)
                os.chmod(path, 0o700)
            target = f"{os.path.dirname(home)}/.{cage}"
            if os.path.lexists(target):
                remove_tree(target)
            os.rename(home, target)
        except OSError:
            return False
        self.path = target
        return True

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                remove_tree(self.path)
            self.path = None


def _remove_entry(entry: os.DirEntry[str]) -> None:
    if entry.is_dir(follow_symlinks=False):
        remove_tree(entry.path)
    else:
        os.unlink(entry.path)


def _write_secrets(path: str, secrets: dict[str, str]) -> list[str]:
    """Each secret as a file of its own, 0400, in ``path`` (0500 once written); a name
    that is not a plain file name is left out (it is in the environment anyway). The
    paths made."""
    os.mkdir(path, 0o700)
    made = [path]
    for name, value in secrets.items():
        if _file_name(name):
            file = f"{path}/{name}"
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
            try:
                os.write(fd, value.encode())
            finally:
                os.close(fd)
            made.append(file)
    os.chmod(path, 0o500)
    return made


def _file_name(name: str) -> bool:
    """A plain file name (never a path, nor hidden), at most 255 characters."""
    return (
        0 < len(name) <= 255
        and (name[0].isalpha() or name[0] == "_")
        and all(c.isalnum() or c in "_.-" for c in name)
        and name.isascii()
    )


def remove_tree(path: str) -> None:
    """Removes a run's directory, whatever modes its command left in it (a supervisor
    that is not root cannot otherwise empty a directory it may not write)."""

    def writable_and_again(func: Any, failed: str, _exc: Any) -> None:
        for d in {os.path.dirname(failed), failed}:
            with contextlib.suppress(OSError):
                if os.path.isdir(d) and not os.path.islink(d):
                    os.chmod(d, 0o700)
        func(failed)

    shutil.rmtree(path, onerror=writable_and_again)
