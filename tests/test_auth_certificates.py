"""A principal named by its client certificate (``cert_subject``): over a node's real
mTLS listener, the subject the handshake verified picks the principal, an unknown
subject is UNAUTHENTICATED, and a bearer token still works on the same listener.

The certificates come from the test CA (``tests.support.certs.Pki``), made at test time;
the node serves with the TLS of ``NodeConfig.tls``, as ``--tls-cert --tls-key
--tls-client-ca`` set it. (The order of a subject's parts is ``test_auth``'s.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import AsyncClient
from shardcron.client.tls import server_tls
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.auth import AuthSource
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.auth import TOKENS, auth_file_text
from tests.support.certs import Pki

SHARDS = 4
SPEC = JobSpec(name="c", task=HandlerTask(name="noop"), schedule=Schedule.cron_expr("0 0 1 1 *"))


@pytest.fixture
async def mtls_node(tmp_path: Path) -> AsyncIterator[tuple[str, Pki]]:
    pki = Pki(tmp_path / "pki")
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(
        auth_file_text(["writer"]) + '\n[[principal]]\nname = "carol"\ncert_subject = "CN=carol"\n'
        'role = "writer"\nowners = ["team-c"]\n'
    )
    tls = server_tls(pki.node.cert, pki.node.key, client_ca=pki.ca, ca=pki.ca)
    node = Node(
        SqliteStore(tmp_path / "db", shard_count=SHARDS),
        LocalCoordination(tmp_path, shard_count=SHARDS, node_id="n"),
        NodeConfig(listen="127.0.0.1:0", node_id="n", tls=tls),
        auth=AuthSource(auth_file),
    )
    await node.start()
    try:
        yield f"127.0.0.1:{node.port}", pki
    finally:
        await node.stop(0)


def client_of(target: str, pki: Pki, name: str, **kw: object) -> AsyncClient:
    tls = pki.client_tls(name)
    return AsyncClient(target, tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key, timeout=10, **kw)  # type: ignore[arg-type]


async def test_a_verified_certificate_subject_names_its_principal(
    mtls_node: tuple[str, Pki],
) -> None:
    target, pki = mtls_node
    async with client_of(target, pki, "carol") as carol:
        job = await carol.create_job(SPEC)
        assert job.owner == "team-c"  # carol's one owner, from her certificate
    async with client_of(target, pki, "stranger") as stranger:
        with pytest.raises(ShardcronError) as refused:
            await stranger.list_jobs()
        assert refused.value.code == "UNAUTHENTICATED"
    # a token on the same listener is judged by the token alone
    async with client_of(target, pki, "carol", token=TOKENS["writer"]) as writer:
        assert (await writer.create_job(SPEC)).owner == "a"
