#!/usr/bin/env python3
"""Fetch, configure, start, health-wait and stop real ZooKeeper and Cassandra.

This is the one place that knows how shardcron runs its real backing servers on
a development or CI machine: no Docker, no tarballs, only Maven Central jars
started as plain ``java`` processes. It uses the standard library only, so it
runs before the project's virtualenv exists.

Command line (see ``--help`` of each)::

    python3 deploy/servers.py ensure-tools
    python3 deploy/servers.py fetch [zookeeper|cassandra|all]
    python3 deploy/servers.py zookeeper start --dir DIR [--nodes 1|3] [--port 2181]
    python3 deploy/servers.py cassandra start --dir DIR [--nodes 1|3] [--heap 512M]
    python3 deploy/servers.py {zookeeper|cassandra} {stop|status} --dir DIR
    python3 deploy/servers.py {zookeeper|cassandra} {kill-node|start-node} --dir DIR --node N
    python3 deploy/servers.py {stop|status} --dir DIR        # both kinds found in DIR

From Python (pytest fixtures)::

    sys.path.insert(0, "<repo>/deploy"); import servers
    zk = servers.ZooKeeper(tmp / "zk", nodes=3).start()    # blocks until serving
    zk.connect_string                                     # "127.0.0.1:2181,..."
    zk.kill_node(zk.leader()); zk.start_node(2); zk.stop()
    cass = servers.Cassandra(tmp / "cass", nodes=1, heap="512M").start()
    cass.contact_points                                   # ["127.0.0.1"]
    cass.kill_node(3); cass.start_node(3); cass.stop()

Layout: jars in ``$SHARDCRON_CACHE/lib/<kind>-<version>/`` (default
``~/.cache/shardcron``); each node in ``DIR/zkN/`` or ``DIR/cassN/`` with its
config, data, logs and ``pid`` file; ``DIR/<kind>.json`` records the cluster's
shape so a DIR reused for another shape is wiped instead of half-reused.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

DEPLOY_DIR = Path(__file__).resolve().parent
KINDS = ("zookeeper", "cassandra")
COMPLETE_MARKER = ".complete"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


def log(message: str) -> None:
    """Progress goes to stderr so stdout carries only the answer (connect string)."""
    print(f"[servers] {message}", file=sys.stderr, flush=True)


class ServerError(RuntimeError):
    """A server could not be fetched, started or health-checked."""


# --------------------------------------------------------------------------
# Tools: java and mvn
# --------------------------------------------------------------------------


@functools.cache
def java_version_text(java: str) -> str:
    """What ``java -version`` prints (to stderr); cached, it takes ~50 ms."""
    return subprocess.run([java, "-version"], capture_output=True, text=True).stderr


def java_major(java: str) -> int:
    """Major version of a java binary: 17 for 'version "17.0.15"', 8 for "1.8"."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', java_version_text(java))
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8" means 8


def find_java() -> str | None:
    """A java >= 17 (Cassandra 5.0's floor): $JAVA_HOME, PATH, then Debian's path."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    if shutil.which("java"):
        candidates.append(shutil.which("java"))
    candidates += sorted(str(p) for p in Path("/usr/lib/jvm").glob("java-*-openjdk-*/bin/java"))
    for java in candidates:
        if os.access(java, os.X_OK) and java_major(java) >= 17:
            return java
    return None


def java_bin() -> str:
    java = find_java()
    if not java:
        raise ServerError("no java >= 17 found: run `python3 deploy/servers.py ensure-tools`")
    return java


def ensure_tools() -> None:
    """Install a JRE 17 and Maven with apt-get, only when they are missing.

    CI images may lack them; developer machines usually have them, and then this
    does nothing (no apt-get run at all).
    """
    missing = []
    if not find_java():
        missing.append("openjdk-17-jre-headless")
    if not shutil.which("mvn"):
        missing.append("maven")
    if not missing:
        log(f"java ({find_java()}) and mvn ({shutil.which('mvn')}) present; nothing to install")
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log(f"installing {' '.join(missing)} with apt-get")
    subprocess.run(sudo + ["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(
        sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        check=True,
        env=env,
    )
    if not find_java() or not shutil.which("mvn"):
        raise ServerError("apt-get finished but java >= 17 or mvn is still missing")


# --------------------------------------------------------------------------
# Fetch: Maven Central jars into the cache
# --------------------------------------------------------------------------


def cache_dir() -> Path:
    """Outside git on purpose: ~100 MB of jars. $SHARDCRON_CACHE overrides."""
    return Path(os.environ.get("SHARDCRON_CACHE") or "~/.cache/shardcron").expanduser()


def server_version(kind: str) -> str:
    """The version pinned in deploy/<kind>/pom.xml: the pom is the single source."""
    pom = (DEPLOY_DIR / kind / "pom.xml").read_text()
    match = re.search(rf"<{kind}\.version>([^<]+)</{kind}\.version>", pom)
    if not match:
        raise ServerError(f"no <{kind}.version> in {DEPLOY_DIR / kind / 'pom.xml'}")
    return match.group(1).strip()


def lib_dir(kind: str) -> Path:
    return cache_dir() / "lib" / f"{kind}-{server_version(kind)}"


def pom_digest(kind: str) -> str:
    """sha256 of deploy/<kind>/pom.xml: editing the pom invalidates the cache."""
    return hashlib.sha256((DEPLOY_DIR / kind / "pom.xml").read_bytes()).hexdigest()


def fetched(kind: str) -> bool:
    """True when the cache holds a complete fetch made from the current pom."""
    marker = lib_dir(kind) / COMPLETE_MARKER
    with contextlib.suppress(OSError):
        return marker.read_text().split("\n", 1)[0] == f"pom-sha256 {pom_digest(kind)}"
    return False


def fetch(kind: str) -> Path:
    """Download <kind>'s runtime jars once; later calls return the cached dir.

    The jars land in a ``.partial`` dir and are renamed into place after Maven
    succeeds, with a marker file, so an interrupted fetch is never mistaken
    for a complete one. A file lock lets parallel test processes share it.
    """
    lib = lib_dir(kind)
    if fetched(kind):
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with open(lib.parent / f".{lib.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if fetched(kind):  # another process fetched it meanwhile
            return lib
        _maven_copy_dependencies(kind, lib)
    return lib


def _maven_copy_dependencies(kind: str, lib: Path) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise ServerError("mvn not found: run `python3 deploy/servers.py ensure-tools`")
    partial = lib.with_name(lib.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(lib, ignore_errors=True)
    cmd = [
        mvn, "-B", "-q", "-f", str(DEPLOY_DIR / kind / "pom.xml"),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={partial}",
    ]  # fmt: skip
    log(f"fetching {kind} {server_version(kind)} jars with Maven into {lib}")
    started = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ServerError(f"mvn failed for {kind}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    jars = sorted(p.name for p in partial.glob("*.jar"))
    (partial / COMPLETE_MARKER).write_text(
        f"pom-sha256 {pom_digest(kind)}\n" + "\n".join(jars) + "\n"
    )
    partial.rename(lib)
    log(f"fetched {len(jars)} jars in {time.monotonic() - started:.1f}s")


# --------------------------------------------------------------------------
# Processes: detached start, pid files, liveness, stop
# --------------------------------------------------------------------------


# Servers this process started. Holding the Popen objects keeps Python from
# warning "subprocess N is still running" when they are garbage collected, and
# lets pid_alive() reap a node we killed instead of leaving a zombie.
_CHILDREN: dict[int, subprocess.Popen] = {}


def spawn_detached(cmd: list[str], cwd: Path, output: Path) -> int:
    """Start cmd in its own session so it outlives the caller (CLI or pytest).

    stdin is /dev/null and stdout/stderr go to a file, so nothing ties the
    server to the caller's terminal or pipes.
    """
    with open(output, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    return proc.pid


def pid_alive(pid: int | None, must_contain: str) -> bool:
    """True while the server process pid (whose command line mentions
    must_contain, normally the node's dir) has not completely exited.

    For a child of this process Popen.poll() is exact, and also reaps it so a
    killed node does not linger as a zombie. For a server started by another
    process (e.g. the CLI) /proc is read instead.
    """
    if not pid:
        return False
    proc = _CHILDREN.get(pid)
    if proc is not None:
        if proc.poll() is None:
            return must_contain in " ".join(proc.args)
        del _CHILDREN[pid]
        return False
    return _proc_alive(pid, must_contain)


def _proc_alive(pid: int, must_contain: str) -> bool:
    """Liveness from /proc, careful about three traps met in practice:

    * pid reuse: a stale pid file must never make us signal an unrelated
      process, hence the command-line check;
    * a JVM that is exiting: its main thread is already a zombie with an empty
      command line while other threads still hold its sockets open, so it
      counts as alive until the last thread is gone;
    * right after exec the command line also reads empty for a moment.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    name, state = fields["Name"].strip(), fields["State"].split()[0]
    if state == "Z" and int(fields["Threads"]) <= 1:
        return False  # fully exited; only its parent's wait() is missing
    if not cmdline:
        return name in ("java", "setpriv")
    return must_contain in cmdline


def rss_mib(pid: int) -> float:
    """Resident set size from /proc, in MiB (0 when the process is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return f"({path} missing)"


# --------------------------------------------------------------------------
# Probes: ZooKeeper four-letter words and a minimal CQL client
# --------------------------------------------------------------------------


def zk_four_letter(host: str, port: int, word: str = "srvr", timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word and return the reply ('' if none)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def zk_mode(host: str, port: int) -> str | None:
    """'standalone', 'leader' or 'follower' once the node serves, else None."""
    match = re.search(r"^Mode: (\w+)", zk_four_letter(host, port, "srvr"), re.M)
    return match.group(1) if match else None


class Cql:
    """Just enough of CQL native protocol v4 to run a health query.

    The health check must be a real query (a listening port is not a serving
    node), and it must work with the standard library alone because this
    script runs before the virtualenv, with its cassandra-driver, exists.
    """

    VERSION = 0x04
    OP_ERROR, OP_STARTUP, OP_READY, OP_QUERY, OP_RESULT = 0x00, 0x01, 0x02, 0x07, 0x08
    CONSISTENCY_ONE = 0x0001

    def __init__(self, host: str, port: int = 9042, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._request(self.OP_STARTUP, self._string_map({"CQL_VERSION": "3.0.0"}))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Cql:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, cql: str) -> list[dict]:
        """Run a query at consistency ONE; rows as dicts (empty for non-SELECT)."""
        body = self._long_string(cql) + struct.pack(">HB", self.CONSISTENCY_ONE, 0)
        return _parse_result(self._request(self.OP_QUERY, body))

    def _request(self, opcode: int, body: bytes) -> bytes:
        self.sock.sendall(struct.pack(">BBhBi", self.VERSION, 0, 0, opcode, len(body)) + body)
        header = self._read_exactly(9)
        _, _, _, op, length = struct.unpack(">BBhBi", header)
        payload = self._read_exactly(length)
        if op == self.OP_ERROR:
            code = struct.unpack(">i", payload[:4])[0]
            raise ServerError(f"CQL error 0x{code:04x}: {_read_string(payload, 4)[0]}")
        if op not in (self.OP_READY, self.OP_RESULT):
            raise ServerError(f"unexpected CQL opcode 0x{op:02x}")
        return payload

    def _read_exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("CQL connection closed")
            data += chunk
        return data

    @staticmethod
    def _string_map(values: dict[str, str]) -> bytes:
        out = struct.pack(">H", len(values))
        for key, value in values.items():
            for s in (key, value):
                out += struct.pack(">H", len(s.encode())) + s.encode()
        return out

    @staticmethod
    def _long_string(s: str) -> bytes:
        return struct.pack(">i", len(s.encode())) + s.encode()


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">H", buf, pos)
    return buf[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def _read_type(buf: bytes, pos: int) -> tuple[int, int]:
    """Skip a type [option]; return its id. Collections keep their outer id."""
    (type_id,) = struct.unpack_from(">H", buf, pos)
    pos += 2
    if type_id == 0x0000:  # custom: class name
        _, pos = _read_string(buf, pos)
    elif type_id in (0x0020, 0x0022):  # list, set
        _, pos = _read_type(buf, pos)
    elif type_id == 0x0021:  # map
        _, pos = _read_type(buf, pos)
        _, pos = _read_type(buf, pos)
    elif type_id in (0x0030, 0x0031):
        raise ServerError("UDT/tuple columns are not supported by this probe")
    return type_id, pos


def _decode(type_id: int, raw: bytes | None) -> object:
    if raw is None:
        return None
    if type_id in (0x0001, 0x000D):  # ascii, varchar
        return raw.decode()
    if type_id in (0x0002, 0x0009, 0x0013, 0x0014):  # bigint, int, smallint, tinyint
        return int.from_bytes(raw, "big", signed=True)
    if type_id == 0x0010:  # inet
        return str(ipaddress.ip_address(raw))
    if type_id in (0x000C, 0x000F):  # uuid, timeuuid
        return str(uuid.UUID(bytes=raw))
    if type_id == 0x0004:  # boolean
        return raw != b"\x00"
    return raw


def _parse_result(payload: bytes) -> list[dict]:
    (kind,) = struct.unpack_from(">i", payload, 0)
    if kind != 0x0002:  # only Rows carry data; Void / Set_keyspace / Schema_change do not
        return []
    flags, ncols = struct.unpack_from(">ii", payload, 4)
    pos = 12
    if flags & 0x0002:  # has_more_pages: skip paging state
        (n,) = struct.unpack_from(">i", payload, pos)
        pos += 4 + max(n, 0)
    columns = []
    if not flags & 0x0004:  # metadata present
        if flags & 0x0001:  # global table spec
            _, pos = _read_string(payload, pos)
            _, pos = _read_string(payload, pos)
        for _ in range(ncols):
            if not flags & 0x0001:
                _, pos = _read_string(payload, pos)
                _, pos = _read_string(payload, pos)
            name, pos = _read_string(payload, pos)
            type_id, pos = _read_type(payload, pos)
            columns.append((name, type_id))
    (nrows,) = struct.unpack_from(">i", payload, pos)
    pos += 4
    rows = []
    for _ in range(nrows):
        row = {}
        for name, type_id in columns:
            (n,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            raw = None if n < 0 else payload[pos : pos + n]
            pos += max(n, 0)
            row[name] = _decode(type_id, raw)
        rows.append(row)
    return rows


def cql_release_version(host: str, port: int = 9042) -> str | None:
    """SELECT release_version FROM system.local, or None while not serving."""
    try:
        with Cql(host, port, timeout=3.0) as cql:
            rows = cql.query("SELECT release_version FROM system.local")
            return rows[0]["release_version"] if rows else None
    except (OSError, ServerError, struct.error):
        return None


# --------------------------------------------------------------------------
# Cassandra class-data-sharing archive
# --------------------------------------------------------------------------


def cassandra_classpath() -> str:
    """The jars in sorted order: a CDS archive only matches the exact classpath
    it was dumped with, and a `lib/*` wildcard expands in directory order."""
    return ":".join(str(p) for p in sorted(lib_dir("cassandra").glob("*.jar")))


def cds_archive_path() -> Path:
    """Archive of Cassandra's loaded classes, keyed by everything the JVM checks
    before using it: the JDK build, and the classpath with each jar's size and
    mtime (a re-fetch copies the jars anew, and the JVM then ignores the old
    archive with only a warning in stdout.log)."""
    java = java_bin()
    jars = [(p, p.stat()) for p in sorted(lib_dir("cassandra").glob("*.jar"))]
    fingerprint = [os.path.realpath(java), java_version_text(java)]
    fingerprint += [f"{p} {st.st_size} {st.st_mtime_ns}" for p, st in jars]
    key = hashlib.sha256("\n".join(fingerprint).encode())
    return (
        cache_dir() / "cds" / f"cassandra-{server_version('cassandra')}-{key.hexdigest()[:12]}.jsa"
    )


def ensure_cds_archive() -> None:
    """Build the CDS archive once per machine by running a throwaway node.

    With the archive, the JVM maps Cassandra's ~10k classes pre-parsed and
    pre-verified instead of loading them from 100 jars: measured 9 s -> 5-6 s
    per node start, and the mapped pages are shared between nodes (less RSS).
    The training node runs on 127.0.0.254 without JMX so that it never
    collides with a cluster on 127.0.0.1-3; the JVM writes the archive when
    that node exits after a clean SIGTERM. Failure only costs speed: nodes
    then start without the archive.
    """
    archive = cds_archive_path()
    if archive.exists():
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return
        work = archive.parent / f"train-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        started = time.monotonic()
        log("building Cassandra class-data-sharing archive (once per machine)")
        trainer = _CdsTrainer(work, archive.with_suffix(".tmp"))
        try:
            trainer.start()
            if not trainer.stop():  # killed: the archive may be half written
                raise ServerError("training node did not exit cleanly")
            archive.with_suffix(".tmp").rename(archive)
            log(f"CDS archive {archive.name} built in {time.monotonic() - started:.1f}s")
            for stale in archive.parent.glob("cassandra-*.jsa"):  # 55 MB each
                if stale != archive:
                    stale.unlink()
        except (ServerError, OSError) as exc:
            trainer.stop()
            log(f"warning: no CDS archive ({exc}); Cassandra starts without it")
        finally:
            shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(OSError):
                archive.with_suffix(".tmp").unlink()


# --------------------------------------------------------------------------
# Clusters
# --------------------------------------------------------------------------


class Cluster:
    """What ZooKeeper and Cassandra clusters share: a DIR with one subdir per node.

    Subclasses say how to configure and command a node (``_write_config``,
    ``_command``) and when it is ready (``_node_ready``); this class handles
    pid files, detached starts, stop/kill and reuse of DIR.
    """

    kind = ""  # "zookeeper" or "cassandra"
    prefix = ""  # node subdir prefix: "zk" -> DIR/zk1
    start_timeout = 120.0
    stop_grace = 20.0

    def __init__(self, dir: str | os.PathLike, nodes: int = 1):
        if nodes not in (1, 3):
            raise ValueError("nodes must be 1 or 3")
        self.dir = Path(dir).resolve()
        self.nodes = nodes
        self.version = server_version(self.kind)
        self.last_ready_seconds: dict[int, float] = {}

    # --- layout -----------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.dir / f"{self.kind}.json"

    def node_dir(self, i: int) -> Path:
        return self.dir / f"{self.prefix}{i}"

    def pid_file(self, i: int) -> Path:
        return self.node_dir(i) / "pid"

    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def identity(self) -> dict:
        """What must match for an existing DIR to be reused rather than wiped."""
        return {"kind": self.kind, "version": self.version, "nodes": self.nodes}

    def settings(self) -> dict:
        """Identity plus settings a later start-node must repeat (e.g. heap)."""
        return self.identity()

    # --- pids -------------------------------------------------------------

    def pid(self, i: int) -> int | None:
        """The node's pid if it is running, else None."""
        try:
            pid = int(self.pid_file(i).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid, str(self.node_dir(i))) else None

    def running(self, i: int) -> bool:
        return self.pid(i) is not None

    # --- lifecycle --------------------------------------------------------

    def start(self) -> Cluster:
        """Start every node that is not running and wait until the cluster serves."""
        java_bin()
        fetch(self.kind)
        self._prepare_jvm()
        self._prepare_dir()
        self._start_nodes()
        self._wait_cluster_formed()
        return self

    def _start_nodes(self) -> None:
        """Default: start all nodes at once, then wait (a quorum needs peers)."""
        begun = time.monotonic()
        for i in self.node_ids():
            self._launch(i)
        for i in self.node_ids():
            self._wait_ready(i, begun)

    def start_node(self, i: int) -> None:
        """(Re)start one node with its existing data and wait until it serves."""
        self._check_node(i)
        begun = time.monotonic()
        self._launch(i)
        self._wait_ready(i, begun)
        self._wait_cluster_formed()

    def kill_node(self, i: int) -> None:
        """SIGKILL one node, as a crash would, and wait until it is gone."""
        self._check_node(i)
        pid = self.pid(i)
        if pid is None:
            log(f"{self.prefix}{i} is not running")
            return
        os.kill(pid, signal.SIGKILL)
        self._wait_gone(pid, i, timeout=10)
        log(f"{self.prefix}{i} (pid {pid}) killed")

    def stop(self, grace: float | None = None) -> bool:
        """SIGTERM every node, wait up to grace seconds (default stop_grace),
        then SIGKILL what is left. grace=0 kills at once: the fast teardown
        for a test whose data is thrown away anyway.

        Returns True when every node exited on SIGTERM alone.
        """
        grace = self.stop_grace if grace is None else grace
        pids = {i: self.pid(i) for i in self._existing_node_ids()}
        pids = {i: pid for i, pid in pids.items() if pid}
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        deadline = time.monotonic() + grace
        clean = grace > 0
        for i, pid in pids.items():
            if not self._wait_gone(pid, i, timeout=max(0.0, deadline - time.monotonic())):
                clean = False
                if grace > 0:
                    log(f"{self.prefix}{i} (pid {pid}) ignored SIGTERM for {grace}s: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_gone(pid, i, timeout=10)
        if pids:
            log(f"{self.kind}: stopped {', '.join(f'{self.prefix}{i}' for i in pids)}")
        return clean

    def status(self) -> list[dict]:
        """One dict per node: running, pid, RSS and a kind-specific health field."""
        out = []
        for i in self._existing_node_ids():
            pid = self.pid(i)
            entry = {
                "node": i,
                "dir": str(self.node_dir(i)),
                "running": pid is not None,
                "pid": pid,
            }
            if pid:
                entry["rss_mib"] = round(rss_mib(pid))
                entry.update(self._health(i))
            out.append(entry)
        return out

    # --- helpers ----------------------------------------------------------

    def _check_node(self, i: int) -> None:
        if i not in self.node_ids():
            raise ValueError(f"node must be in 1..{self.nodes}")
        if not self.node_dir(i).is_dir():
            raise ServerError(f"{self.node_dir(i)} does not exist: start the cluster first")

    def _existing_node_ids(self) -> list[int]:
        """Node numbers that have a dir in DIR, whatever self.nodes says."""
        if not self.dir.is_dir():
            return []
        found = [p.name[len(self.prefix) :] for p in self.dir.glob(f"{self.prefix}[0-9]*")]
        return sorted(int(n) for n in found if n.isdigit())

    def _prepare_dir(self) -> None:
        """Reuse DIR for the same cluster shape; otherwise stop and wipe our part of it.

        Only our own files (DIR/<kind>.json and DIR/<prefix>N/) are removed, so a
        DIR may hold a ZooKeeper and a Cassandra side by side.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            previous = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            previous = None
        same = previous is not None and all(
            previous.get(k) == v for k, v in self.identity().items()
        )
        if not same and (previous is not None or self._existing_node_ids()):
            log(
                f"{self.dir} holds another {self.kind} cluster ({previous}): stopping and wiping it"
            )
            self.stop()
            for i in self._existing_node_ids():
                shutil.rmtree(self.node_dir(i))
        self.state_file.write_text(json.dumps(self.settings(), indent=2) + "\n")
        for i in self.node_ids():
            self.node_dir(i).mkdir(exist_ok=True)

    def _launch(self, i: int) -> bool:
        """Write node i's config and start its JVM unless it already runs."""
        if self.running(i):
            log(f"{self.prefix}{i} already running (pid {self.pid(i)})")
            return False
        self._check_ports_free(i)
        self._write_config(i)
        pid = spawn_detached(self._command(i), self.node_dir(i), self.node_dir(i) / "stdout.log")
        self.pid_file(i).write_text(f"{pid}\n")
        log(f"{self.prefix}{i} started (pid {pid})")
        return True

    def _check_ports_free(self, i: int) -> None:
        """Fail fast, with a useful message, when another server holds our port."""
        for host, port in self._ports(i):
            if port_open(host, port):
                raise ServerError(
                    f"{host}:{port} is already in use: another cluster running? "
                    f"(`servers.py status --dir ...`, or stop it)"
                )

    def _wait_ready(self, i: int, begun: float) -> None:
        """Poll until node i serves; fail early, with its log, if its JVM dies."""
        deadline = begun + self.start_timeout
        while time.monotonic() < deadline:
            if not self.running(i):
                raise ServerError(f"{self.prefix}{i} exited during startup:\n{self._log_tail(i)}")
            if self._startup_failed(i):
                raise ServerError(f"{self.prefix}{i} failed to start:\n{self._log_tail(i)}")
            if self._node_ready(i):
                self.last_ready_seconds[i] = time.monotonic() - begun
                log(f"{self.prefix}{i} ready after {self.last_ready_seconds[i]:.1f}s")
                return
            time.sleep(0.25)
        raise ServerError(
            f"{self.prefix}{i} not ready after {self.start_timeout:.0f}s:\n{self._log_tail(i)}"
        )

    def _wait_gone(self, pid: int, i: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while pid_alive(pid, str(self.node_dir(i))):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    # --- per kind ---------------------------------------------------------

    def _prepare_jvm(self) -> None:
        """One-time, per-machine JVM preparation (Cassandra: the CDS archive)."""

    def _ports(self, i: int) -> list[tuple[str, int]]:
        raise NotImplementedError

    def _write_config(self, i: int) -> None:
        raise NotImplementedError

    def _command(self, i: int) -> list[str]:
        raise NotImplementedError

    def _node_ready(self, i: int) -> bool:
        raise NotImplementedError

    def _startup_failed(self, i: int) -> bool:
        """True when the log shows a fatal error although the JVM still runs."""
        return False

    def _wait_cluster_formed(self) -> None:
        """After nodes are ready one by one: wait until they agree with each other."""

    def _health(self, i: int) -> dict:
        return {}

    def _log_tail(self, i: int) -> str:
        return tail(self.node_dir(i) / "stdout.log")


class ZooKeeper(Cluster):
    """A standalone ZooKeeper or a 3-node ensemble on 127.0.0.1.

    Node i listens for clients on port+i-1 (2181, 2182, 2183), for followers on
    port+700+i-1 (2881..) and for leader election on port+1700+i-1 (3881..).
    """

    kind = "zookeeper"
    prefix = "zk"
    host = "127.0.0.1"
    heap = "256M"

    def __init__(self, dir: str | os.PathLike, nodes: int = 1, port: int = 2181):
        super().__init__(dir, nodes)
        self.port = port

    def identity(self) -> dict:
        return {**super().identity(), "port": self.port}

    def client_port(self, i: int) -> int:
        return self.port + i - 1

    @property
    def connect_string(self) -> str:
        return ",".join(f"{self.host}:{self.client_port(i)}" for i in self.node_ids())

    def mode(self, i: int) -> str | None:
        return zk_mode(self.host, self.client_port(i))

    def leader(self) -> int | None:
        """Number of the node that is leader now (None when standalone or no quorum)."""
        for i in self.node_ids():
            if self.running(i) and self.mode(i) == "leader":
                return i
        return None

    def _ports(self, i: int) -> list[tuple[str, int]]:
        ports = [self.client_port(i)]
        if self.nodes > 1:
            ports += [self.port + 700 + i - 1, self.port + 1700 + i - 1]
        return [(self.host, p) for p in ports]

    def _write_config(self, i: int) -> None:
        """zoo.cfg tuned for tests.

        tickTime=1000 lets clients ask for sessions from 2 s (minSessionTimeout)
        to 20 s, so tests can use 4-6 s sessions for fast failover. forceSync=no
        skips an fsync per write: tests kill processes, not machines, and the
        page cache survives a SIGKILL.
        """
        node = self.node_dir(i)
        data = node / "data"
        data.mkdir(exist_ok=True)
        lines = [
            "tickTime=1000",
            "initLimit=10",
            "syncLimit=5",
            "minSessionTimeout=2000",
            "maxSessionTimeout=20000",
            f"dataDir={data}",
            f"clientPort={self.client_port(i)}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "forceSync=no",
            "maxClientCnxns=0",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if self.nodes > 1:
            for n in self.node_ids():
                quorum, election = self.port + 700 + n - 1, self.port + 1700 + n - 1
                lines.append(f"server.{n}={self.host}:{quorum}:{election}")
            (data / "myid").write_text(f"{i}\n")
        (node / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def _command(self, i: int) -> list[str]:
        node = self.node_dir(i)
        (node / "tmp").mkdir(exist_ok=True)
        return [
            java_bin(),
            f"-Xmx{self.heap}",
            "-XX:+PerfDisableSharedMem",
            "-Djava.net.preferIPv4Stack=true",
            f"-Djava.io.tmpdir={node / 'tmp'}",
            f"-Dzookeeper.log.dir={node}",
            f"-Dlogback.configurationFile={DEPLOY_DIR / 'zookeeper' / 'logback.xml'}",
            "-cp", f"{lib_dir(self.kind)}/*",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(node / "zoo.cfg"),
        ]  # fmt: skip

    def _node_ready(self, i: int) -> bool:
        mode = self.mode(i)
        return mode == "standalone" if self.nodes == 1 else mode in ("leader", "follower")

    def _startup_failed(self, i: int) -> bool:
        """ZooKeeper's main thread can die (e.g. a missing jar) while other
        non-daemon threads keep the JVM up, answering srvr with 'not currently
        serving requests' forever: spot that instead of waiting for a timeout."""
        zk_log = self.node_dir(i) / "zookeeper.log"
        with contextlib.suppress(OSError):
            text = zk_log.read_text(errors="replace")
            return bool(re.search(r"Thread\[main,\d+,main\] died|exiting abnormally", text))
        return False

    def _health(self, i: int) -> dict:
        return {"mode": self.mode(i), "client_port": self.client_port(i)}

    def _log_tail(self, i: int) -> str:
        return (
            f"{tail(self.node_dir(i) / 'zookeeper.log')}\n{tail(self.node_dir(i) / 'stdout.log')}"
        )


class Cassandra(Cluster):
    """One Cassandra node on 127.0.0.1, or three on 127.0.0.1/.2/.3.

    Linux routes all of 127.0.0.0/8 to lo, so three nodes need no network
    setup: each binds its own address with the same ports (7000 storage, 9042
    CQL); only JMX ports differ (7199, 7200, 7201) because JMX binds localhost.
    """

    kind = "cassandra"
    prefix = "cass"
    start_timeout = 180.0
    cluster_name = "shardcron"
    native_port = 9042
    storage_port = 7000
    jmx_base_port = 7199
    # Evenly spaced Murmur3 tokens, one per node (num_tokens: 1): no token
    # allocation at startup and balanced ownership.
    tokens = {1: ["0"], 3: ["-9223372036854775808", "-3074457345618258603", "3074457345618258602"]}

    def __init__(
        self, dir: str | os.PathLike, nodes: int = 1, heap: str = "512M", use_cds: bool = True
    ):
        super().__init__(dir, nodes)
        if not re.fullmatch(r"\d+[MG]", heap):
            raise ValueError("heap looks like 512M or 1G")
        self.heap = heap
        self.use_cds = use_cds
        self._log_offsets: dict[int, int] = {}

    def settings(self) -> dict:
        return {**super().settings(), "heap": self.heap, "use_cds": self.use_cds}

    def _prepare_jvm(self) -> None:
        if self.use_cds:
            ensure_cds_archive()

    def address(self, i: int) -> str:
        return f"127.0.0.{i}"

    def jmx_port(self, i: int) -> int | None:
        return self.jmx_base_port + i - 1

    @property
    def contact_points(self) -> list[str]:
        return [self.address(i) for i in self.node_ids()]

    def _ports(self, i: int) -> list[tuple[str, int]]:
        return [
            (self.address(i), self.native_port),
            (self.address(i), self.storage_port),
            *([("127.0.0.1", self.jmx_port(i))] if self.jmx_port(i) else []),
        ]

    def _start_nodes(self) -> None:
        """One after another: each node joins a ring the previous ones formed."""
        for i in self.node_ids():
            begun = time.monotonic()
            self._launch(i)
            self._wait_ready(i, begun)

    def _launch(self, i: int) -> bool:
        """Start node i, remembering where its log ended: readiness then looks
        only at this run's lines, not at a 'Startup complete' of a previous run."""
        system_log = self.node_dir(i) / "logs" / "system.log"
        offset = system_log.stat().st_size if system_log.exists() else 0
        launched = super()._launch(i)
        self._log_offsets[i] = offset if launched else 0
        return launched

    def _write_config(self, i: int) -> None:
        node = self.node_dir(i)
        for sub in ("conf", "conf/triggers", "data", "logs", "tmp"):
            (node / sub).mkdir(exist_ok=True)
        yaml = self._yaml(i)
        (node / "conf" / "cassandra.yaml").write_text(yaml)

    def _yaml(self, i: int) -> str:
        """cassandra.yaml for a small, fast-starting test node.

        Sized for a 2-core machine that also runs the tests: 4 read/write
        threads, 1 compactor, 64 MiB memtables, small caches. auto_snapshot off
        because tests TRUNCATE and DROP often, and each snapshot costs a flush.
        """
        data = self.node_dir(i) / "data"
        seeds = ",".join(f"{self.address(n)}:{self.storage_port}" for n in self.node_ids())
        return f"""\
cluster_name: {self.cluster_name}
num_tokens: 1
initial_token: {self.tokens[self.nodes][i - 1]}
auto_bootstrap: false
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seeds}"
listen_address: {self.address(i)}
rpc_address: {self.address(i)}
storage_port: {self.storage_port}
native_transport_port: {self.native_port}
start_native_transport: true
storage_compatibility_mode: NONE

data_file_directories:
  - {data / "data"}
commitlog_directory: {data / "commitlog"}
saved_caches_directory: {data / "saved_caches"}
hints_directory: {data / "hints"}
cdc_raw_directory: {data / "cdc_raw"}

commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 16MiB

concurrent_reads: 4
concurrent_writes: 4
concurrent_counter_writes: 4
concurrent_materialized_view_writes: 4
concurrent_compactors: 1
memtable_flush_writers: 1
memtable_allocation_type: heap_buffers
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
key_cache_size: 8MiB
counter_cache_size: 0MiB
file_cache_size: 32MiB
networking_cache_size: 16MiB
index_summary_capacity: 8MiB
native_transport_max_threads: 32

authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
network_authorizer: AllowAllNetworkAuthorizer

auto_snapshot: false
incremental_backups: false
snapshot_before_compaction: false
hinted_handoff_enabled: true
"""

    def _command(self, i: int) -> list[str]:
        node = self.node_dir(i)
        jmx_port = self.jmx_port(i)
        return [
            *self._no_mlockall_prefix(),
            java_bin(),
            *self._jvm_options(),
            "-Djava.net.preferIPv4Stack=true",
            f"-Djava.io.tmpdir={node / 'tmp'}",
            f"-Djna.tmpdir={node / 'tmp'}",
            f"-Dcassandra.config=file://{node / 'conf' / 'cassandra.yaml'}",
            f"-Dcassandra.storagedir={node / 'data'}",
            f"-Dcassandra.logdir={node / 'logs'}",
            f"-Dcassandra.triggers_dir={node / 'conf' / 'triggers'}",
            f"-Dlogback.configurationFile={DEPLOY_DIR / 'cassandra' / 'logback.xml'}",
            "-Dcassandra-foreground=yes",
            *([f"-Dcassandra.jmx.local.port={jmx_port}"] if jmx_port else []),
            *self._fast_start_options(),
            "-cp", cassandra_classpath(),
            "org.apache.cassandra.service.CassandraDaemon",
        ]  # fmt: skip

    def _jvm_options(self) -> list[str]:
        """Heap, JIT and class-sharing flags, then Cassandra's own Java 17 list."""
        flags = [
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-Xss256k",
            "-XX:+PerfDisableSharedMem",
            "-XX:+ExitOnOutOfMemoryError",
            # C1 only: C2 compiling Cassandra's startup path costs more CPU
            # than it saves on a 2-core box; test traffic is light. Measured:
            # first start 12.8 s -> ~9 s.
            "-XX:TieredStopAtLevel=1",
        ]
        archive = cds_archive_path()
        if self.use_cds and archive.exists():
            flags.append(f"-XX:SharedArchiveFile={archive}")
        # No -javaagent:jamm: CDS refuses to dump with an agent, and jamm 0.4
        # falls back to Unsafe-based measuring without it.
        return flags + self._jvm17_options()

    @staticmethod
    def _no_mlockall_prefix() -> list[str]:
        """Run java without CAP_IPC_LOCK when we are root.

        Cassandra always calls mlockall(MCL_CURRENT) at startup. As root that
        succeeds and faults in every mapped page: +2.7 s of startup and a
        resident heap whether used or not. Without the capability the call
        fails against RLIMIT_MEMLOCK, Cassandra logs a warning and goes on
        (exactly what happens for a non-root user). setpriv execs java, so the
        pid we record is still java's.
        """
        if os.geteuid() == 0 and shutil.which("setpriv"):
            return ["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]
        return []

    @staticmethod
    def _jvm17_options() -> list[str]:
        """Flags from deploy/cassandra/jvm17-server.options (one per line)."""
        text = (DEPLOY_DIR / "cassandra" / "jvm17-server.options").read_text()
        flags = []
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                flags += line.split()  # "--add-opens X" is two argv words
        return flags

    @staticmethod
    def _fast_start_options() -> list[str]:
        """System properties that remove waits meant for big production clusters."""
        return [
            # Gossiper.waitToSettle polls for >= 5 s on every start; 0 skips it.
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            # A seed whose peers are all down waits ring_delay (30 s by default,
            # here rounded up to whole seconds) in its gossip shadow round.
            "-Dcassandra.ring_delay_ms=100",
            # Otherwise measured at each start by filling a 100k-row skip list
            # (~2.4 s here); 180 is what 5.0.9 measures on this JVM.
            "-Dcassandra.memtable.row_overhead_size=180",
            # Default 2 s sleep in drain after announcing shutdown to peers.
            "-Dcassandra.shutdown_announce_in_ms=500",
        ]

    def _node_ready(self, i: int) -> bool:
        """'Startup complete' logged by this run, and CQL answers a real query."""
        system_log = self.node_dir(i) / "logs" / "system.log"
        try:
            with open(system_log, "rb") as f:
                f.seek(self._log_offsets.get(i, 0))
                started = b"Startup complete" in f.read()
        except OSError:
            return False
        return started and cql_release_version(self.address(i), self.native_port) is not None

    def gossip_view(self, i: int) -> dict[str, tuple]:
        """Node i's gossip state: address -> (generation, status, schema version)."""
        query = (
            'SELECT address, generation, status_with_port, "schema" FROM system_views.gossip_info'
        )
        with Cql(self.address(i), self.native_port) as cql:
            rows = cql.query(query)
        return {
            r["address"]: (
                r["generation"],
                (r["status_with_port"] or "").split(",")[0],
                r["schema"],
            )
            for r in rows
        }

    def _wait_cluster_formed(self, timeout: float = 60.0) -> None:
        """Wait until every running node sees every running node as NORMAL, at
        its current generation (so a restart is noticed), with one schema.

        Each node being ready on its own does not mean its peers have heard of
        it yet: without this, a test that writes at ALL, or creates a table,
        right after start() races gossip.
        """
        live = [i for i in self.node_ids() if self.running(i)]
        if len(live) < 2:
            return
        begun = time.monotonic()
        while time.monotonic() - begun < timeout:
            with contextlib.suppress(OSError, ServerError, struct.error):
                if self._views_agree({i: self.gossip_view(i) for i in live}):
                    log(
                        f"cluster formed: {len(live)} nodes agree ({time.monotonic() - begun:.1f}s)"
                    )
                    return
            time.sleep(0.25)
        raise ServerError(f"nodes {live} did not agree on ring and schema within {timeout:.0f}s")

    def _views_agree(self, views: dict[int, dict[str, tuple]]) -> bool:
        schemas = set()
        for view in views.values():
            for peer in views:
                own_generation = views[peer].get(self.address(peer), (None,))[0]
                generation, status, schema = view.get(self.address(peer), (None, None, None))
                if own_generation is None or generation != own_generation or status != "NORMAL":
                    return False
                schemas.add(schema)
        return len(schemas) == 1

    def _health(self, i: int) -> dict:
        return {
            "address": self.address(i),
            "release_version": cql_release_version(self.address(i), self.native_port),
        }

    def _log_tail(self, i: int) -> str:
        logs = self.node_dir(i) / "logs"
        return f"{tail(logs / 'system.log')}\n{tail(self.node_dir(i) / 'stdout.log')}"


class _CdsTrainer(Cassandra):
    """A single throwaway node that dumps a CDS archive when it exits."""

    def __init__(self, dir: Path, archive_out: Path):
        super().__init__(dir, nodes=1, use_cds=False)
        self.archive_out = archive_out

    def address(self, i: int) -> str:
        return "127.0.0.254"

    def jmx_port(self, i: int) -> int | None:
        return None

    def _prepare_jvm(self) -> None:
        pass

    def _jvm_options(self) -> list[str]:
        return [*super()._jvm_options(), f"-XX:ArchiveClassesAtExit={self.archive_out}"]


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def _cluster_from_dir(kind: str, directory: str) -> Cluster:
    """Rebuild a cluster object from DIR/<kind>.json (for stop/status/kill/start-node)."""
    state_file = Path(directory) / f"{kind}.json"
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError) as exc:
        raise ServerError(f"no {kind} cluster recorded in {directory} ({exc})") from exc
    if kind == "zookeeper":
        return ZooKeeper(directory, nodes=state["nodes"], port=state["port"])
    return Cassandra(
        directory, nodes=state["nodes"], heap=state["heap"], use_cds=state.get("use_cds", True)
    )


def _print_status(cluster: Cluster) -> None:
    for entry in cluster.status():
        print(f"{cluster.kind} " + " ".join(f"{k}={v}" for k, v in entry.items()))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ensure-tools", help="apt-get install java 17 and maven if missing")
    fetch_p = sub.add_parser("fetch", help="download server jars into the cache")
    fetch_p.add_argument("what", nargs="?", default="all", choices=[*KINDS, "all"])
    grace_help = "seconds between SIGTERM and SIGKILL (0: SIGKILL at once)"
    for name in ("stop", "status"):
        p = sub.add_parser(name, help=f"{name} every cluster recorded in DIR")
        p.add_argument("--dir", required=True)
        if name == "stop":
            p.add_argument("--grace", type=float, default=None, help=grace_help)
    for kind in KINDS:
        kind_p = sub.add_parser(kind, help=f"manage a {kind} cluster")
        actions = kind_p.add_subparsers(dest="action", required=True)
        start = actions.add_parser("start", help="start (or complete) the cluster and wait")
        start.add_argument("--dir", required=True)
        start.add_argument("--nodes", type=int, choices=(1, 3), default=1)
        if kind == "zookeeper":
            start.add_argument("--port", type=int, default=2181)
        else:
            start.add_argument("--heap", default="512M")
            start.add_argument(
                "--no-cds", action="store_true", help="start without the class-data-sharing archive"
            )
        actions.add_parser("status").add_argument("--dir", required=True)
        stop = actions.add_parser("stop")
        stop.add_argument("--dir", required=True)
        stop.add_argument("--grace", type=float, default=None, help=grace_help)
        for name in ("kill-node", "start-node"):
            p = actions.add_parser(name)
            p.add_argument("--dir", required=True)
            p.add_argument("--node", type=int, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "ensure-tools":
            ensure_tools()
        elif args.command == "fetch":
            for kind in KINDS if args.what == "all" else (args.what,):
                print(fetch(kind))
                if kind == "cassandra":
                    ensure_cds_archive()
        elif args.command in ("stop", "status"):
            kinds = [k for k in KINDS if (Path(args.dir) / f"{k}.json").exists()]
            if not kinds:
                log(f"no zookeeper.json or cassandra.json in {args.dir}: nothing to {args.command}")
            for kind in kinds:
                cluster = _cluster_from_dir(kind, args.dir)
                cluster.stop(args.grace) if args.command == "stop" else _print_status(cluster)
        elif args.action == "start":
            if args.command == "zookeeper":
                zk = ZooKeeper(args.dir, nodes=args.nodes, port=args.port).start()
                print(zk.connect_string)
            else:
                cass = Cassandra(
                    args.dir, nodes=args.nodes, heap=args.heap, use_cds=not args.no_cds
                ).start()
                print(",".join(cass.contact_points))
        else:
            cluster = _cluster_from_dir(args.command, args.dir)
            if args.action == "stop":
                cluster.stop(args.grace)
            elif args.action == "status":
                _print_status(cluster)
            elif args.action == "kill-node":
                cluster.kill_node(args.node)
            elif args.action == "start-node":
                cluster.start_node(args.node)
    except ServerError as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
