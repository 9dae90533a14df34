"""A free TCP port for a server this process is about to start.

A port found by binding port 0 comes from the kernel's ephemeral range, the range
it also draws from for every outgoing connection's source port and for every other
bind to port 0. Between the probe closing and the server binding, a driver's new
connection or a proxy's listener may be given that very port, and the server then
fails to bind. So a port is drawn at random from below the ephemeral range, where the
kernel never hands out ports by itself, is checked to be free by a bind, and is never
handed out twice by one process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000
_given: set[int] = set()
_lock = threading.Lock()


def _ephemeral_floor() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` nothing listens on now, below the ephemeral range, not given
    before by this process."""
    top = _ephemeral_floor()
    if top - _LOWEST < 1_000:  # a machine whose ephemeral range starts low
        with socket.create_server((host, 0)) as probe:
            return int(probe.getsockname()[1])
    with _lock:
        for _ in range(200):
            port = random.randrange(_LOWEST, top)
            if port in _given:
                continue
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind((host, port))
            except OSError:
                continue
            _given.add(port)
            return port
    raise OSError(f"no free port found on {host} between {_LOWEST} and {top}")
