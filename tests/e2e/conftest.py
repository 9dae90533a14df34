"""Fixtures for end-to-end tests: a shared ``shardcron dev`` per module, a client per test.

Tests keep apart by owner: every test gets a client with an owner of its own,
and the store scopes everything to it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardcron.client.sdk import Client
from tests.e2e.harness import DevServer


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """One dev server for a module: 2 in-process workers with 8 slots each, 3 s leases."""
    server = DevServer(
        tmp_path_factory.mktemp("dev") / "data",
        extra=["--workers", "2", "--slots", "8", "--lease-ttl", "3s"],
    ).start()
    yield server
    server.stop()


@pytest.fixture
def client(dev: DevServer) -> Iterator[Client]:
    c = dev.client()
    yield c
    c.close()
