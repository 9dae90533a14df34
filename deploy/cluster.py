"""A whole shardcron cluster on this machine: `make cluster`, `make cluster-down`,
`make cluster-reset`.

Starts a ZooKeeper, a Cassandra node, the schema, three shardcron nodes (api,
coordinator and poller roles each) and two workers that find the pollers
through ZooKeeper. Every process's pid and log go under ``.cluster/`` so
``down`` (and a newcomer) can find them; endpoints are printed at the end.

Every gRPC connection is mTLS: ``.cluster/tls/`` holds a CA and the certificates it
signs (``deploy.certs``, made with ``openssl``): the nodes serve with ``node.crt``,
require client certificates of the CA and call each other with ``node.crt``; the
workers present ``worker.crt``, the user ``client.crt``. Each node serves its HTTP/JSON
API and dashboard too (``HTTP_BASE_PORT`` on: 7431, 7432, 7433), over TLS with the
same certificates, a client certificate required, and the same tokens as a bearer.

Tokens are on too: ``up`` makes an admin, a node and a worker token (``tokens.json``,
readable by its owner only) and the auth file that holds their digests
(``auth.toml``); the nodes get ``--auth-file`` and the node token, the workers
their token, through the environment. ``client_env`` gives the ``SHARDCRON_TLS_*``
variables and the admin's ``SHARDCRON_TOKEN`` that the CLI and SDK read (printed).
Secret env values are sealed at rest: the nodes share ``secrets.keys`` (mode 0600,
kept across ``up``s so the values stored before open again).

Runs' whole output goes to a blob store every node shares: a Versity S3 gateway
(``deploy.versitygw``) on 127.0.0.1:7490 over ``.cluster/s3/``, bucket ``shardcron``;
its key pair is in ``.cluster/s3/access_key`` and ``secret_key`` (mode 0600), which the
nodes are given by file name, never on their command line.

``down`` stops the processes and keeps the ZooKeeper and Cassandra data under
``.cluster/``: the next ``up`` resumes the jobs it held, under a new leader at a later
epoch. ``start_node`` starts one node again with the arguments ``up`` gave it (after a
crash: the bench's S1 kills the nodes and times their restart). ``reset`` stops everything too and deletes that data, for a fresh start.

    python -m deploy.cluster up [--dir .cluster] [--nodes 3] [--workers 2] [--slots 8]
    python -m deploy.cluster status
    python -m deploy.cluster down
    python -m deploy.cluster reset

Run it from the repository root with the project's interpreter (``make cluster``):
the nodes and workers are started with that interpreter's ``shardcron``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from deploy.cassandra import Cassandra
from deploy.certs import make_certs
from deploy.process import pid_alive, spawn_detached
from deploy.versitygw import VersityGateway
from deploy.zookeeper import ZooKeeper

REPO = Path(__file__).resolve().parent.parent

BASE_PORT = 7401
HTTP_BASE_PORT = 7431  # the nodes' HTTP/JSON API and dashboard: 7431, 7432, ...
CLUSTER = "local"
KEYSPACE = "shardcron"
ZK_PORT = 2191  # apart from the ports the tests use, so both can run at once
# The cluster's Cassandra is sized to carry load (``Cassandra(server=True)``: threads,
# memtables off the heap); the heap is what a 2-core, 24 GiB machine can spare.
CASSANDRA_HEAP = "2G"
S3_PORT = 7490
S3_BUCKET = "shardcron"


class LocalCassandra(Cassandra):
    """The cluster's Cassandra on 127.0.0.11 (JMX 7211): not the tests' 127.0.0.1."""

    jmx_base_port = 7211

    def address(self, i: int) -> str:
        return f"127.0.0.{10 + i}"


def shardcron(*args: str) -> list[str]:
    """The shardcron program of the interpreter running this script (the project's venv)."""
    return [sys.executable, "-m", "shardcron", *args]


def write_tokens(state: Path) -> dict[str, str]:
    """An admin, a node and a worker token (kept in ``tokens.json``, mode 0600) and the
    auth file of their principals (``auth.toml``); the tokens of an earlier ``up``
    are kept."""
    tokens_file = state / "tokens.json"
    if tokens_file.exists():
        tokens: dict[str, str] = json.loads(tokens_file.read_text())
    else:
        tokens = {role: secrets.token_urlsafe(32) for role in ("admin", "node", "worker")}
        tokens_file.touch(mode=0o600)
        tokens_file.write_text(json.dumps(tokens, indent=2))
    principals = []
    for role, token in tokens.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        owners = 'owners = ["*"]\n' if role == "worker" else ""
        principals.append(
            f'[[principal]]\nname = "local-{role}"\ntoken_sha256 = "{digest}"\n'
            f'role = "{role}"\n{owners}'
        )
    (state / "auth.toml").write_text("\n".join(principals))
    return tokens


def write_secrets_key(state: Path) -> Path:
    """The nodes' ``--secrets-key-file`` (one key, mode 0600); an earlier ``up``'s is kept."""
    path = state / "secrets.keys"
    if not path.exists():
        path.touch(mode=0o600)
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        path.write_text(f"local-1 {key}\n")
    return path


def spawn(name: str, cmd: list[str], state: Path, env: dict[str, str] | None = None) -> int:
    log = state / f"{name}.log"
    pid = spawn_detached(cmd, REPO, log, env)
    (state / f"{name}.pid").write_text(str(pid))
    return pid


def client_env(state: Path) -> dict[str, str]:
    """The variables that make the CLI and SDK connect to the cluster as its user: the
    client certificate and the admin token (once ``up`` has made the tokens)."""
    tls = state / "tls"
    env = {
        "SHARDCRON_TLS_CA": str(tls / "ca.crt"),
        "SHARDCRON_TLS_CERT": str(tls / "client.crt"),
        "SHARDCRON_TLS_KEY": str(tls / "client.key"),
    }
    tokens = state / "tokens.json"
    if tokens.exists():
        env["SHARDCRON_TOKEN"] = json.loads(tokens.read_text())["admin"]
    return env


def blob_store_args(gateway: VersityGateway) -> list[str]:
    """A node's flags for the cluster's S3 gateway: its credentials named by file."""
    return [
        "--blob-store", f"s3://{S3_BUCKET}/blobs",
        "--blob-endpoint", gateway.endpoint,
        "--blob-region", "us-east-1",
        "--blob-access-key-file", str(gateway.access_key_file),
        "--blob-secret-key-file", str(gateway.secret_key_file),
    ]  # fmt: skip


def node_tls_args(tls: Path) -> list[str]:
    """A node's flags: serve with the node certificate, require clients of the CA."""
    node = ["--tls-cert", str(tls / "node.crt"), "--tls-key", str(tls / "node.key")]
    return [*node, "--tls-client-ca", str(tls / "ca.crt"), "--tls-ca", str(tls / "ca.crt")]


def wait_serving(target: str, state: Path, timeout: float = 60) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    env = client_env(state)
    credentials = grpc.ssl_channel_credentials(
        *(Path(env[f"SHARDCRON_TLS_{k}"]).read_bytes() for k in ("CA", "KEY", "CERT"))
    )
    deadline = time.monotonic() + timeout
    with grpc.secure_channel(target, credentials) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                if (
                    stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                    == health_pb2.HealthCheckResponse.SERVING
                ):
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise SystemExit(f"{target} did not start serving within {timeout:.0f}s")


def node_target(i: int) -> str:
    """Node ``i``'s gRPC address (``BASE_PORT`` on)."""
    return f"127.0.0.1:{BASE_PORT + i - 1}"


def node_http_url(i: int) -> str:
    """Node ``i``'s HTTP/JSON API and dashboard (``HTTP_BASE_PORT`` on): HTTPS with the
    node certificate, a client certificate of the CA required, as on its gRPC port."""
    return f"https://127.0.0.1:{HTTP_BASE_PORT + i - 1}"


def spawn_node(
    state: Path, i: int, zk: str, cassandra: str, gateway: VersityGateway, node_token: str
) -> int:
    """Starts node ``i`` (every role) on its ports, detached; returns its pid."""
    tls = state / "tls"
    return spawn(
        f"node{i}",
        shardcron(
            "node",
            "--zk", zk,
            "--cluster", CLUSTER,
            "--cassandra", cassandra,
            "--keyspace", KEYSPACE,
            "--listen", node_target(i),
            "--node-id", f"node{i}",
            "--metrics-listen", f"127.0.0.1:{9464 + i}",
            "--http-listen", f"127.0.0.1:{HTTP_BASE_PORT + i - 1}",
            "--auth-file", str(state / "auth.toml"),
            "--secrets-key-file", str(state / "secrets.keys"),
            *blob_store_args(gateway),
            *node_tls_args(tls),
        ),
        state,
        {"SHARDCRON_NODE_TOKEN": node_token},
    )  # fmt: skip


def start_node(state: Path, i: int) -> int:
    """Starts node ``i`` of a cluster ``up`` made, with the arguments ``up`` gave it
    (ZooKeeper, Cassandra and the S3 gateway as ``endpoints.json`` and ``state`` say),
    not waiting for it to serve: a node restarted after a crash. Returns its pid."""
    state = state.resolve()
    endpoints = json.loads((state / "endpoints.json").read_text())
    tokens = json.loads((state / "tokens.json").read_text())
    gateway = VersityGateway(state / "s3", port=S3_PORT)
    return spawn_node(
        state, i, endpoints["zookeeper"], endpoints["cassandra"], gateway, tokens["node"]
    )


def up(state: Path, nodes: int, workers: int, slots: int = 8) -> None:
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    tls = make_certs(state / "tls", clients=("worker", "client"))
    zk = ZooKeeper(state / "zookeeper", nodes=1, port=ZK_PORT)
    cassandra = LocalCassandra(state / "cassandra", nodes=1, heap=CASSANDRA_HEAP, server=True)
    gateway = VersityGateway(state / "s3", port=S3_PORT)
    print("starting ZooKeeper, Cassandra and the S3 gateway ...", file=sys.stderr)
    zk.start()
    cassandra.start()
    gateway.start(buckets=[S3_BUCKET])
    contact = ",".join(cassandra.contact_points)
    tokens = write_tokens(state)
    write_secrets_key(state)  # the nodes' --secrets-key-file
    subprocess.run(
        shardcron("store", "init", "--cassandra", contact, "--keyspace", KEYSPACE), check=True
    )
    targets = []
    for i in range(1, nodes + 1):
        targets.append(node_target(i))
        spawn_node(state, i, zk.connect_string, contact, gateway, tokens["node"])
    for target in targets:
        wait_serving(target, state)
    for i in range(1, workers + 1):
        spawn(
            f"worker{i}",
            shardcron(
                "worker",
                "--zk",
                zk.connect_string,
                "--cluster",
                CLUSTER,
                "--id",
                f"worker{i}",
                "--slots",
                str(slots),
                "--tls-ca",
                str(tls / "ca.crt"),
                "--tls-cert",
                str(tls / "worker.crt"),
                "--tls-key",
                str(tls / "worker.key"),
            ),
            state,
            {"SHARDCRON_TOKEN": tokens["worker"]},
        )
    env = client_env(state)
    # the token is read from its 0600 file when the export runs, never printed itself
    env["SHARDCRON_TOKEN"] = (
        f'$(python3 -c \'import json; print(json.load(open("{state}/tokens.json"))["admin"])\')'
    )
    endpoints = {
        "api": targets,
        "http": [node_http_url(i) for i in range(1, nodes + 1)],
        "zookeeper": zk.connect_string,
        "cassandra": contact,
        "blob_store": f"s3://{S3_BUCKET}/blobs at {gateway.endpoint}",
        "metrics": [f"http://127.0.0.1:{9464 + i}/metrics" for i in range(1, nodes + 1)],
        "logs": str(state),
        "tls": {k: v for k, v in env.items() if k.startswith("SHARDCRON_TLS_")},
    }
    (state / "endpoints.json").write_text(json.dumps(endpoints, indent=2))
    print(f"""shardcron cluster up
  api        {", ".join(targets)}   (mTLS; certificates in {tls}/; tokens in {state}/tokens.json)
  http       {", ".join(endpoints["http"])}   (HTTP/JSON API and dashboard; the same mTLS and tokens)
  zookeeper  {zk.connect_string}
  cassandra  {contact}  keyspace {KEYSPACE}
  blobs      s3://{S3_BUCKET}/blobs at {gateway.endpoint} (data in {gateway.data_dir})
  metrics    {", ".join(endpoints["metrics"])}
  logs, pids {state}/
try:
  export SHARDCRON_TARGET={targets[0]} {" ".join(f"{k}={v}" for k, v in env.items())}
  shardcron cluster status""")


def _pids(state: Path) -> dict[str, int]:
    out = {}
    for pid_file in sorted(state.glob("*.pid")):
        try:
            out[pid_file.stem] = int(pid_file.read_text())
        except ValueError:
            continue
    return out


def down(state: Path) -> None:
    procs = _pids(state)
    # workers first (their runs end), then nodes
    for _name, pid in sorted(procs.items(), key=lambda item: not item[0].startswith("worker")):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 20
    for name, pid in procs.items():
        while time.monotonic() < deadline and pid_alive(pid, "shardcron"):
            time.sleep(0.1)
        if pid_alive(pid, "shardcron"):
            os.kill(pid, signal.SIGKILL)
        (state / f"{name}.pid").unlink(missing_ok=True)
    if (state / "zookeeper").exists():
        ZooKeeper(state / "zookeeper", port=ZK_PORT).stop()
    if (state / "cassandra").exists():
        LocalCassandra(state / "cassandra").stop()
    if (state / "s3").exists():
        VersityGateway(state / "s3", port=S3_PORT).stop()
    print("shardcron cluster down", file=sys.stderr)


def reset(state: Path) -> None:
    """``down``, then delete the servers' data (runs' output in the S3 gateway too) and
    the processes' logs: the next ``up``
    starts an empty cluster at epoch 1."""
    down(state)
    for data in ("zookeeper", "cassandra", "s3"):
        shutil.rmtree(state / data, ignore_errors=True)
    for leftover in (*state.glob("*.log"), state / "endpoints.json"):
        leftover.unlink(missing_ok=True)
    print(f"shardcron cluster data deleted from {state}", file=sys.stderr)


def status(state: Path) -> None:
    for name, pid in _pids(state).items():
        print(f"{name:10s} pid {pid:7d}  {'running' if pid_alive(pid, 'shardcron') else 'gone'}")
    endpoints = state / "endpoints.json"
    if endpoints.exists():
        print(endpoints.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "down", "reset", "status"])
    parser.add_argument("--dir", default=str(REPO / ".cluster"))
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=8, help="slots per worker")
    args = parser.parse_args()
    state = Path(args.dir)
    if args.command == "up":
        up(state, args.nodes, args.workers, args.slots)
    elif args.command == "down":
        down(state)
    elif args.command == "reset":
        reset(state)
    else:
        status(state)


if __name__ == "__main__":
    main()
