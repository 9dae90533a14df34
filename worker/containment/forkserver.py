"""The worker's fork server: one small process per worker that forks a supervisor
(``supervisor``) for each command run.

A supervisor forked from a process that is already running costs a fork, not the
start of an interpreter; and the worker itself never forks (its gRPC threads make a
fork of it slow and unsafe). The worker starts it with ``python -I -S`` (standard
library only, no site packages: this package is imported by its folder), in the
worker's own process group, with a ``SOCK_SEQPACKET`` socket on its stdin. Each
message on it carries three descriptors (the run's control socket, the write ends of
its stdout and stderr pipes): the server forks, and the child becomes the run's
supervisor. Everything else about the run goes over the run's own control socket.

It ignores SIGINT, SIGTERM and SIGHUP (a Ctrl-C or a signal to the worker's group
spares it): EOF on its socket, the worker closing it or dying, ends it. The runs its
children supervise are not its: each one ends when its own worker socket does.
Children are reaped by the kernel (SIGCHLD ignored), so none is left a zombie.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys

from . import supervisor

FDS_PER_RUN = 3  # the run's control socket, its stdout and its stderr


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
            message, fds, _, _ = socket.recv_fds(server, 16, FDS_PER_RUN, socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not message:
            return 0  # EOF: the worker is gone or done
        if len(fds) != FDS_PER_RUN:
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
            except BaseException as e:  # noqa: BLE001 - its run's end, nothing of the server's
                print(f"shardcron supervisor {os.getpid()} failed: {e!r}", file=sys.stderr)
            finally:
                os._exit(code)
        for d in fds:
            os.close(d)


def main() -> int:
    return serve()
