"""A run's result files, taken out of its private directory by its supervisor once
nothing of the run is left: the command's ``$SHARDCRON_RESULT_DIR`` (``HOME/results``,
made empty for each run and given to the run's user) is hostile input.

Only regular files at its top level are taken, each opened without following a link
(``O_NOFOLLOW``, then ``fstat``: a regular file, owned by the run's user when the run
has one), under a name of the blob key alphabet, within the run's bounds (files, bytes
each, bytes in all). Each is copied, with its sha256, into ``HOME.results``, a folder of
the supervisor's own user that the run never had, which the worker reads, sends and
removes; what was left out is said, one note per file or bound, never silently. The
run's directory, results and all, is then removed as ever.

Standard library only: the supervisor imports nothing else.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import Any

RESULTS = "results"  # HOME/results: the command's $SHARDCRON_RESULT_DIR
COPY_CHUNK = 1 << 20
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")
MAX_NAME = 255
MAX_NOTES = 20  # notes kept of one run; the rest are counted


def outbox_of(home: str) -> str:
    """Where the run's result files are copied for its worker to read."""
    return f"{home}.results"


def is_name(name: str) -> bool:
    """A plain file name of the blob key alphabet (``client.limits.is_result_name``)."""
    return (
        0 < len(name) <= MAX_NAME
        and name[0] in NAME_CHARS
        and name[0] not in "._-@"
        and all(c in NAME_CHARS for c in name)
    )


def collect(home: str, uid: int | None, bounds: list[int]) -> dict[str, Any]:
    """Copies the result files of the run whose directory is ``home`` into its outbox;
    ``bounds``: files, bytes per file, bytes in all. Returns the ``R`` report's
    ``results``: ``dir``, ``files`` ([name, size, sha256] each, by name) and ``notes``."""
    max_files, max_file_bytes, max_bytes = bounds
    outbox = outbox_of(home)
    files: list[list[Any]] = []
    notes: list[str] = []
    made = ""  # the outbox, once made: the worker removes it
    try:
        src = os.open(f"{home}/{RESULTS}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno != errno.ENOENT:
            notes.append(f"$SHARDCRON_RESULT_DIR could not be read: {_reason(e)}")
        return {"dir": "", "files": files, "notes": notes}
    try:
        names = sorted(os.listdir(src))
        if not names:
            return {"dir": "", "files": files, "notes": notes}
        os.mkdir(outbox, 0o700)
        made = outbox
        dst = os.open(outbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            total = 0
            for i, name in enumerate(names):
                if len(files) >= max_files:
                    left = len(names) - i
                    noun = "file" if left == 1 else "files"
                    notes.append(f"{left} {noun} left out: a run keeps {max_files}")
                    break
                taken = _take(src, dst, name, uid, max_file_bytes, max_bytes - total, notes)
                if taken is not None:
                    files.append(taken)
                    total += taken[1]
        finally:
            os.close(dst)
    except OSError as e:
        notes.append(f"result files could not be taken: {_reason(e)}")
    finally:
        os.close(src)
    if len(notes) > MAX_NOTES:
        notes[MAX_NOTES:] = [f"and {len(notes) - MAX_NOTES} more left out"]
    return {"dir": made, "files": files, "notes": notes}


def _take(
    src: int, dst: int, name: str, uid: int | None, most: int, room: int, notes: list[str]
) -> list[Any] | None:
    """Copies ``name`` if it may be taken: [name, size, sha256]; else a note, None."""
    shown = _shown(name)
    if not is_name(name):
        notes.append(f"{shown}: not a plain file name of letters, digits, '.', '_', '-', '@'")
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=src)
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else _reason(e)
        notes.append(f"{name}: left out: {why}")
        return None
    try:
        st = os.fstat(fd)
        why = ""
        if stat.S_ISDIR(st.st_mode):
            why = "a directory (only files at the top level are taken)"
        elif not stat.S_ISREG(st.st_mode):
            why = "not a regular file"
        elif uid is not None and st.st_uid != uid:
            why = "not owned by the run's user"
        elif st.st_size > most:
            why = f"{st.st_size} bytes, past the {most} a result file may hold"
        elif st.st_size > room:
            why = "past the bytes a run's result files may hold together"
        if why:
            notes.append(f"{name}: left out: {why}")
            return None
        return _copy(fd, dst, name, min(most, room), notes)
    finally:
        os.close(fd)


def _copy(fd: int, dst: int, name: str, most: int, notes: list[str]) -> list[Any] | None:
    digest = hashlib.sha256()
    size = 0
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst)
    try:
        while data := os.read(fd, COPY_CHUNK):
            size += len(data)
            if size > most:
                break
            digest.update(data)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(out)
    if size > most:
        os.unlink(name, dir_fd=dst)
        notes.append(f"{name}: left out: it grew past its bound while read")
        return None
    return [name, size, digest.hexdigest()]


def _shown(name: str) -> str:
    text = name.encode("ascii", "backslashreplace").decode()
    return repr(text if len(text) <= 64 else text[:61] + "...")


def _reason(e: OSError) -> str:
    return e.strerror or str(e)
