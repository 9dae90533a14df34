"""Cassandra for tests and local clusters: one node on 127.0.0.1, or three on .1/.2/.3.

Two sizings: the default starts fast on a small machine, for the test suites'
throw-away nodes (see deploy/README.md for what each flag bought); ``server=True``
is for a cluster that carries load (``make cluster``, the cluster benchmark): a
bigger heap, memtables off the heap, more read and write threads, bigger caches.
A node is ready when its log shows ``Startup complete`` for this run and it
answers a CQL query; with three nodes, a start also waits until every node sees
every other one NORMAL at its current generation, with one schema.
The class-data-sharing archive that makes starts fast is built here, once per
machine, by a throwaway node.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

from deploy.cql import Cql, cql_release_version
from deploy.errors import ServerError, log
from deploy.nodes import Cluster
from deploy.process import tail
from deploy.tools import DEPLOY_DIR, cassandra_classpath, cds_archive_path, java_bin


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
        self,
        dir: str | os.PathLike,
        nodes: int = 1,
        heap: str = "512M",
        use_cds: bool = True,
        server: bool = False,
    ):
        super().__init__(dir, nodes)
        if not re.fullmatch(r"\d+[MG]", heap):
            raise ValueError("heap looks like 512M or 1G")
        self.heap = heap
        self.use_cds = use_cds
        self.server = server  # sized for load rather than for a fast start (module docstring)
        self._log_offsets: dict[int, int] = {}

    def settings(self) -> dict:
        return {
            **super().settings(),
            "heap": self.heap,
            "use_cds": self.use_cds,
            "server": self.server,
        }

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
        """cassandra.yaml of node i, sized by ``_sizing``. auto_snapshot off because
        tests TRUNCATE and DROP often, and each snapshot costs a flush; batch warning
        thresholds above the store's batches."""
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

{self._sizing()}
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
network_authorizer: AllowAllNetworkAuthorizer

# Above the store's batches (coordinator/cassandra/batches.py bounds them below the
# default 50 KiB failure threshold, and groups partitions by replica set): no batch
# pays for a warning.
batch_size_warn_threshold: 48KiB
unlogged_batch_across_partitions_warn_threshold: 1000

auto_snapshot: false
incremental_backups: false
snapshot_before_compaction: false
hinted_handoff_enabled: true
"""

    def _sizing(self) -> str:
        """The cassandra.yaml lines that size a node.

        A test node shares a 2-core machine with the tests: 4 read/write threads,
        1 compactor, 64 MiB memtables, small caches. A server node (``server``) takes
        load: 16 read/write threads (Cassandra's advice: 8 per core for writes),
        memtables off the heap (less for the collector to trace), bigger caches.
        """
        if not self.server:
            return """\
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
"""
        return """\
concurrent_reads: 16
concurrent_writes: 16
concurrent_counter_writes: 8
concurrent_materialized_view_writes: 8
concurrent_compactors: 1
memtable_flush_writers: 1
memtable_allocation_type: offheap_objects
memtable_heap_space: 256MiB
memtable_offheap_space: 512MiB
key_cache_size: 64MiB
counter_cache_size: 16MiB
file_cache_size: 128MiB
networking_cache_size: 32MiB
index_summary_capacity: 32MiB
native_transport_max_threads: 32
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
        ]
        if not self.server:
            # C1 only for a test node: C2 compiling Cassandra's startup path costs more
            # CPU than it saves in a test's life (first start 12.8 s -> ~9 s). A server
            # node keeps the full tiered JIT: once its hot paths are compiled (about a
            # minute of load, 1-1.2 cores of C2 meanwhile), W3 at 400 jobs/s cost it
            # 0.41-0.50 cores against 0.66 with C1 only, and 0.07 idle against 0.17-0.23.
            flags.append("-XX:TieredStopAtLevel=1")
        else:
            # A server node keeps what C2 compiled: the JVM's code-cache sweeper drops
            # code unused for a while, and a load that comes back (a burst of creates
            # after a quiet spell) pays its compiles again. With the sweeper on, a node
            # idle between runs had 1.2 of its 11.5 MB of optimized code left, and C2
            # took 0.7-0.8 CPU-s of each later 10,000-job burst; 0.2-0.5 without it. The
            # code a node compiles is bounded by its code (240 MB reserved, ~35 MB used).
            flags.append("-XX:-UseCodeCacheFlushing")
            # Its compiler threads all start with the JVM and stay: what the JIT costs
            # is then theirs to read, per thread (the bench's "jit of cassandra"),
            # where threads started and ended with the compile queue take their CPU
            # with them.
            flags.append("-XX:-UseDynamicNumberOfCompilerThreads")
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

    def nodetool(self, i: int, *args: str, timeout: float = 300.0) -> str:
        """Runs ``nodetool args`` against node ``i`` over its local JMX port (the jars'
        ``NodeTool``: the fetched runtime has no ``bin/``); returns its output, raises
        ``ServerError`` with it when it fails."""
        port = self.jmx_port(i)
        if port is None:
            raise ServerError(f"{self.prefix}{i} has no JMX port: nodetool cannot reach it")
        done = subprocess.run(
            [
                java_bin(), *self._jvm17_options(), "-cp", cassandra_classpath(),
                "org.apache.cassandra.tools.NodeTool", "-h", "127.0.0.1", "-p", str(port),
                *args,
            ],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-4000:]  # its DEBUG lines come first
            raise ServerError(f"nodetool {' '.join(args)} failed:\n{output}")
        return done.stdout

    def keyspace_bytes(self, i: int, keyspace: str) -> int:
        """Bytes of every file under node ``i``'s data directory for ``keyspace`` (its
        SSTables, indexes and snapshots; memtables count only once flushed)."""
        tables = self.node_dir(i) / "data" / "data" / keyspace
        return sum(f.stat().st_size for f in tables.rglob("*") if f.is_file())

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
