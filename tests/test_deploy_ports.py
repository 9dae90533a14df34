"""``deploy.ports.free_port``: a port a test server can bind, that nothing else is
given meanwhile."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from deploy import ports
from deploy.ports import free_port


def _ephemeral_floor() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_port_is_below_the_range_the_kernel_hands_out_by_itself() -> None:
    floor = _ephemeral_floor()
    ports = [free_port() for _ in range(50)]
    assert all(p < floor for p in ports), ports
    with socket.create_server(("127.0.0.1", 0)) as kernel_given:
        assert kernel_given.getsockname()[1] >= floor  # what the old probe would have given


def test_a_port_is_never_given_twice_and_binds() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    with socket.create_server(("127.0.0.1", ports[-1])):
        pass


def test_a_port_someone_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    floor = _ephemeral_floor()
    busy = next(p for p in range(floor - 1, 10_000, -1) if _bindable(p))
    idle = next(p for p in range(busy - 1, 10_000, -1) if _bindable(p))
    draws = iter([busy, busy, idle])
    monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(draws))
    with socket.create_server(("127.0.0.1", busy)):
        assert free_port() == idle


def _bindable(port: int) -> bool:
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False
