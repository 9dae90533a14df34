"""The worker's fork server: one small process per worker that forks its runs'
supervisors (``supervisor``), as many as it runs commands at once.

A supervisor forked from a process that is already running costs a fork, not the
start of an interpreter; and the worker itself never forks (its gRPC threads make a
fork of it slow and unsafe). The worker starts it with ``python -I -S`` (standard
library only, no site packages: this package is imported by its folder), in the
worker's own process group, with a ``SOCK_SEQPACKET`` socket on its stdin. Each
message on it carries one descriptor, a supervisor's socket to the worker: the
server forks, and the child becomes that supervisor. Everything about the runs goes
over the supervisor's own socket.

It ignores SIGINT, SIGTERM and SIGHUP (a Ctrl-C or a signal to the worker's group
spares it): EOF on its socket, the worker closing it or dying, ends it. The
supervisors it forked are not its: each one ends when its own worker socket does.
Children are reaped by the kernel (SIGCHLD ignored), so none is left a zombie.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys

from . import supervisor

FDS_PER_SUPERVISOR = 1  # its socket to the worker


def serve(fd: int = 0) -> int:
    # A forked supervisor shares this process's pages until it writes one; the cyclic
    # collector would visit (and so copy) every object: none of them is ever garbage.
    gc.freeze()
    gc.disable()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    server = socket.socket(fileno=fd)
    server.setblocking(True)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(
                server, 16, FDS_PER_SUPERVISOR, socket.MSG_CMSG_CLOEXEC
            )
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not message:
            return 0  # EOF: the worker is gone or done
        if len(fds) != FDS_PER_SUPERVISOR:
            for d in fds:
                os.close(d)
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                null = os.open(os.devnull, os.O_RDWR)
                server.close()  # frees fd 0: the supervisor's stdin is /dev/null
                os.dup2(null, 0)
                os.close(null)
                code = supervisor.run(*fds)
            except BaseException as e:  # noqa: BLE001 - its own end, nothing of the server's
                print(f"shardcron supervisor {os.getpid()} failed: {e!r}", file=sys.stderr)
            finally:
                os._exit(code)
        for d in fds:
            os.close(d)


def main() -> int:
    return serve()
