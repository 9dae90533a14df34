"""TLS on a real in-process node: the SDK (both clients), a worker and the node's own
calls to other nodes connect with TLS; mTLS refuses a client without a certificate
of its CA; plaintext to a TLS port is refused; the listen rule and the options.

Certificates are made at test time (``tests.support.certs``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shardcron.client.errors import InvalidArgument, Unavailable
from shardcron.client.sdk import AsyncClient, Client
from shardcron.client.tls import (
    TLS_CA_ENV,
    TLS_CERT_ENV,
    TLS_KEY_ENV,
    ClientTls,
    ServerTls,
    check_listen,
    is_loopback,
    server_tls,
)
from shardcron.client.types import HandlerTask, JobSpec, RunState
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.router import ShardRouter
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.worker import HandlerRegistry, Worker
from tests.support.certs import Pki, make_pki

SHARDS = 8
REFUSED_TIMEOUT = 5.0  # a refused handshake fails at once; this only bounds a hang


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_node(data: Path, tls: ServerTls | None, listen: str = "127.0.0.1:0") -> Node:
    store = SqliteStore(data / "shardcron.db", shard_count=SHARDS)
    coordination = LocalCoordination(data, shard_count=SHARDS, node_id="tls")
    return Node(store, coordination, NodeConfig(listen=listen, node_id="tls", tls=tls))


@pytest.fixture
async def tls_only(tmp_path: Path, pki: Pki) -> AsyncIterator[Node]:
    """A node serving TLS, not asking clients for certificates."""
    node = tls_node(tmp_path, server_tls(pki.node.cert, pki.node.key))
    await node.start()
    yield node
    await node.stop()


@pytest.fixture
async def mtls(tmp_path: Path, pki: Pki) -> AsyncIterator[Node]:
    """A node requiring client certificates signed by the test CA."""
    node = tls_node(tmp_path, server_tls(pki.node.cert, pki.node.key, pki.ca, pki.ca))
    await node.start()
    yield node
    await node.stop()


def spec(name: str = "tls") -> JobSpec:
    return JobSpec(name=name, task=HandlerTask(name="noop"))


async def test_async_client_creates_and_reads_over_tls(tls_only: Node, pki: Pki) -> None:
    async with AsyncClient(f"localhost:{tls_only.port}", owner="tls", tls_ca=pki.ca) as client:
        job = await client.create_job(spec())
        assert (await client.get_job(job.id)).id == job.id


async def test_sync_client_takes_its_files_from_the_environment(
    mtls: Node, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = pki.client("alice")
    monkeypatch.setenv(TLS_CA_ENV, str(pki.ca))
    monkeypatch.setenv(TLS_CERT_ENV, str(alice.cert))
    monkeypatch.setenv(TLS_KEY_ENV, str(alice.key))

    def create_and_list() -> list[str]:
        with Client(f"127.0.0.1:{mtls.port}", owner="env") as client:
            created = client.create_job(spec())
            return [j.id for j in client.list_jobs().items if j.id == created.id]

    assert len(await asyncio.to_thread(create_and_list)) == 1


async def test_mtls_accepts_a_client_certificate_of_its_ca(mtls: Node, pki: Pki) -> None:
    alice = pki.client("alice")
    async with AsyncClient(
        f"127.0.0.1:{mtls.port}", tls_ca=pki.ca, tls_cert=alice.cert, tls_key=alice.key
    ) as client:
        assert (await client.list_jobs()).items == []


async def refused(node: Node, **tls: Path) -> bool:
    """Whether a call to ``node`` with these TLS files fails to connect."""
    async with AsyncClient(f"127.0.0.1:{node.port}", timeout=REFUSED_TIMEOUT, **tls) as client:
        try:
            await client.list_jobs()
        except Unavailable:
            return True
    return False


async def test_mtls_refuses_a_client_without_a_certificate(mtls: Node, pki: Pki) -> None:
    assert await refused(mtls, tls_ca=pki.ca)


async def test_mtls_refuses_a_certificate_of_another_ca(mtls: Node, pki: Pki) -> None:
    mallory = pki.untrusted_client("mallory")
    assert await refused(mtls, tls_ca=pki.ca, tls_cert=mallory.cert, tls_key=mallory.key)


async def test_plaintext_to_a_tls_port_is_refused(tls_only: Node) -> None:
    assert await refused(tls_only)


async def test_a_client_refuses_a_server_its_ca_did_not_sign(tls_only: Node, pki: Pki) -> None:
    assert await refused(tls_only, tls_ca=pki.other_ca)


async def test_several_targets_fail_over_over_tls(tmp_path: Path, pki: Pki) -> None:
    """The channel's authority is the first address, whose node is down: the node that
    answers is checked against it, so its certificate names every node's address."""
    node = tls_node(tmp_path, server_tls(pki.node.cert, pki.node.key), listen="127.0.0.2:0")
    await node.start()
    try:
        down = unused_port()
        target = f"127.0.0.3:{down},127.0.0.2:{node.port}"
        async with AsyncClient(target, owner="rr", tls_ca=pki.ca) as client:
            job = await client.create_job(spec(), idempotency_key="rr-1")
            assert (await client.get_job(job.id)).id == job.id
    finally:
        await node.stop()


async def test_a_worker_takes_leases_over_mtls(mtls: Node, pki: Pki) -> None:
    tls = pki.client_tls("worker")
    registry = HandlerRegistry()
    registry.register("noop", lambda ctx: None)
    worker = Worker(
        f"127.0.0.1:{mtls.port}",
        worker_id="tls-worker",
        slots=2,
        registry=registry,
        runs_commands=False,
        credentials=tls.credentials(),
    )
    task = asyncio.create_task(worker.run())
    try:
        async with AsyncClient(
            f"127.0.0.1:{mtls.port}", owner="w", tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key
        ) as client:
            job = await client.create_job(spec())
            [run] = await client.wait_job_runs(job.id, count=1, timeout=30)
            assert run.state == RunState.SUCCEEDED
    finally:
        await worker.stop()
        await task


async def test_a_node_calls_other_nodes_with_its_own_certificate(mtls: Node, pki: Pki) -> None:
    """``ShardRouter`` reaches a poller over ``PollerService`` with the node's peer
    credentials; without them the mTLS node is unreachable and is left out."""
    assert mtls.poller is not None
    peer = server_tls(pki.node.cert, pki.node.key, ca=pki.ca)
    assert peer is not None
    for credentials, answered in ((peer.peer_tls().credentials(), 1), (None, 0)):
        router = ShardRouter(mtls.coordination, None, SHARDS, credentials)
        try:
            statuses = await router.poller_statuses(None)
        finally:
            await router.close()
        assert [s.poller_id for s in statuses] == ["tls"] * answered


def test_loopback_addresses() -> None:
    for listen in ("127.0.0.1:7400", "127.0.0.9:1", "[::1]:7400", "localhost:7400"):
        assert is_loopback(listen), listen
    for listen in ("0.0.0.0:7400", "[::]:7400", ":7400", "10.1.2.3:7400", "no-such.invalid:1"):
        assert not is_loopback(listen), listen


def test_a_node_refuses_to_listen_off_loopback_in_plaintext(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(InvalidArgument) as e:
        tls_node(tmp_path, None, listen="0.0.0.0:0")
    assert e.value.field == "listen" and "--insecure" in e.value.reason
    check_listen("0.0.0.0:7400", tls=False, insecure=True)
    tls_node(tmp_path, server_tls(pki.node.cert, pki.node.key), listen="0.0.0.0:0")


async def test_a_certificate_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    node = tls_node(tmp_path, server_tls(tmp_path / "missing.crt", tmp_path / "missing.key"))
    with pytest.raises(InvalidArgument) as e:
        await node.start()
    assert e.value.field == "tls_key" and "missing.key" in e.value.reason
    assert node.server is None


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"cert": "c.pem"}, "tls_key"),
        ({"key": "k.pem"}, "tls_cert"),
        ({"client_ca": "ca.pem"}, "tls_client_ca"),
        ({"ca": "ca.pem"}, "tls_ca"),
    ],
)
def test_half_given_server_options_are_invalid(given: dict[str, str], field: str) -> None:
    options = {"cert": None, "key": None, "client_ca": None, "ca": None, **given}
    with pytest.raises(InvalidArgument) as e:
        server_tls(**options)
    assert e.value.field == field


def test_client_options() -> None:
    assert ClientTls().credentials() is None
    assert not ClientTls().enabled and ClientTls(ca="ca.pem").enabled
    with pytest.raises(InvalidArgument) as e:
        ClientTls(cert="c.pem")
    assert e.value.field == "tls_key"
    with pytest.raises(InvalidArgument) as e:
        ClientTls(ca="/nonexistent/ca.pem").credentials()
    assert e.value.field == "tls_ca"


def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.3", 0))
        return int(s.getsockname()[1])
