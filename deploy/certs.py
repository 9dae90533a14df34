"""Certificates for a local cluster, made with the ``openssl`` command.

``make_certs(directory)`` writes a CA and the certificates it signs, with the same
``openssl`` commands the README's "Securing shardcron" section shows:

- ``ca.crt``/``ca.key``: the CA (``CN=shardcron local CA``);
- ``node.crt``/``node.key``: every node's certificate (``CN=node``), for serving and
  for calling the other nodes (server and client use), naming ``localhost``,
  ``127.0.0.1`` and ``::1``;
- ``<name>.crt``/``<name>.key`` for each client name given (``CN=<name>``, client use):
  the workers' and the user's.

Files already there are kept (a cluster started again keeps its CA). Keys are
written readable by their owner only. Standard library only; ``openssl`` must be
installed (``ServerError`` says so otherwise).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from deploy.errors import ServerError

DAYS = 365
CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
NODE_NAMES = ("DNS:localhost", "IP:127.0.0.1", "IP:::1")
NODE_EXTENSIONS = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = {names}
"""
CLIENT_EXTENSIONS = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
"""


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise ServerError(
            "openssl is not installed (apt-get install openssl): it makes the certificates"
        )
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServerError(f"openssl {args[0]} failed: {done.stderr.strip()[-2000:]}")


def _sign(directory: Path, stem: str, common_name: str, extensions: str) -> None:
    """``stem.key`` and ``stem.crt`` for ``CN=common_name``, signed by the CA."""
    if (directory / f"{stem}.crt").exists():
        return
    ext = directory / f"{stem}.ext"
    ext.write_text(extensions)
    _openssl(
        "req", "-new", *CURVE, "-keyout", f"{stem}.key", "-out", f"{stem}.csr",
        "-subj", f"/CN={common_name}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", str(DAYS), "-sha256", "-extfile", ext.name,
        "-out", f"{stem}.crt",
        cwd=directory,
    )  # fmt: skip
    (directory / f"{stem}.key").chmod(0o600)
    (directory / f"{stem}.csr").unlink()
    ext.unlink()


def make_certs(
    directory: Path, clients: Iterable[str] = (), node_names: Iterable[str] = NODE_NAMES
) -> Path:
    """The CA, the node certificate (naming ``node_names``, openssl's ``DNS:``/``IP:``
    form) and one certificate per client name, in ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "ca.crt").exists():
        _openssl(
            "req", "-x509", "-new", *CURVE, "-keyout", "ca.key", "-out", "ca.crt",
            "-days", str(DAYS), "-subj", "/CN=shardcron local CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )  # fmt: skip
        (directory / "ca.key").chmod(0o600)
    _sign(directory, "node", "node", NODE_EXTENSIONS.format(names=", ".join(node_names)))
    for name in clients:
        _sign(directory, name, name, CLIENT_EXTENSIONS)
    return directory
