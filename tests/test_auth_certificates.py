"""A principal named by its client certificate (``cert_subject``): over a real mTLS
listener, the subject the handshake verified picks the principal, an unknown subject is
UNAUTHENTICATED, and a bearer token still works on the same listener.

The certificates are made with the ``openssl`` command (skipped without it); the
listener is added here to a node's gRPC server as the TLS flags will add it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.api import JobsApi
from shardcron.coordinator.auth import AuthSource
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.router import ShardRouter
from shardcron.coordinator.service import build_server
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.auth import TOKENS, auth_file_text

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
SHARDS = 4
SPEC = JobSpec(name="c", task=HandlerTask(name="noop"), schedule=Schedule.cron_expr("0 0 1 1 *"))


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(d: Path) -> None:
    """A CA, a server certificate for localhost, and client certificates for carol
    (O=Example) and for a stranger, signed by the CA."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "1", "-subj", "/CN=test-ca", cwd=d)  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, subject in (
        ("server", "/CN=localhost"),
        ("carol", "/O=Example/CN=carol"),
        ("stranger", "/CN=stranger"),
    ):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", subject, cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", "san.cnf",
                cwd=d)  # fmt: skip


@pytest.fixture
async def mtls_target(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    make_certificates(tmp_path)
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(
        auth_file_text(["writer"])
        + '\n[[principal]]\nname = "carol"\ncert_subject = "O=Example, CN=carol"\n'
        'role = "writer"\nowners = ["team-c"]\n'
    )
    store = SqliteStore(tmp_path / "db", shard_count=SHARDS)
    await store.open()
    coordination = LocalCoordination(tmp_path, shard_count=SHARDS, node_id="n")
    router = ShardRouter(coordination, None, SHARDS)
    server, _ = build_server(
        "127.0.0.1:0",
        api=JobsApi(store, router, Metrics()),
        poller=None,
        coordination=coordination,
        router=router,
        auth=AuthSource(auth_file),
    )
    credentials = grpc.ssl_server_credentials(
        [((tmp_path / "server.key").read_bytes(), (tmp_path / "server.crt").read_bytes())],
        root_certificates=(tmp_path / "ca.crt").read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    try:
        yield f"localhost:{port}", tmp_path
    finally:
        await server.stop(0)
        await router.close()
        await store.close()


def client_of(target: str, d: Path, name: str, **kw: object) -> AsyncClient:
    credentials = grpc.ssl_channel_credentials(
        (d / "ca.crt").read_bytes(),
        (d / f"{name}.key").read_bytes(),
        (d / f"{name}.crt").read_bytes(),
    )
    return AsyncClient(target, credentials=credentials, timeout=10, **kw)  # type: ignore[arg-type]


async def test_a_verified_certificate_subject_names_its_principal(
    mtls_target: tuple[str, Path],
) -> None:
    target, d = mtls_target
    async with client_of(target, d, "carol") as carol:
        job = await carol.create_job(SPEC)
        assert job.owner == "team-c"  # carol's one owner, from her certificate
    async with client_of(target, d, "stranger") as stranger:
        with pytest.raises(ShardcronError) as refused:
            await stranger.list_jobs()
        assert refused.value.code == "UNAUTHENTICATED"
    # a token on the same listener is judged by the token alone
    async with client_of(target, d, "carol", token=TOKENS["writer"]) as writer:
        assert (await writer.create_job(SPEC)).owner == "a"
