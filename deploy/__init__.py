"""Real ZooKeeper, Cassandra and an S3 gateway on this machine: fetch, start, wait, stop.

The one place that knows how shardcron runs its real backing servers on a
development or CI machine: no Docker, no tarballs, only Maven Central jars started
as plain ``java`` processes, and the Versity S3 gateway built from its Go module. Standard library only, so it runs (``make servers``)
before the project's virtualenv exists.

Command line, from the repository root (see ``--help`` of each)::

    python3 -m deploy ensure-tools
    python3 -m deploy fetch [zookeeper|cassandra|all]
    python3 -m deploy zookeeper start --dir DIR [--nodes 1|3] [--port 2181]
    python3 -m deploy cassandra start --dir DIR [--nodes 1|3] [--heap 512M]
    python3 -m deploy {zookeeper|cassandra} {stop|status} --dir DIR
    python3 -m deploy {zookeeper|cassandra} {kill-node|start-node} --dir DIR --node N
    python3 -m deploy {stop|status} --dir DIR        # both kinds found in DIR
    python3 -m deploy fetch versitygw                 # go install, once (~2 minutes)
    python3 -m deploy versitygw start --dir DIR [--port 7070] [--bucket NAME]...
    python3 -m deploy versitygw stop --dir DIR

From Python (pytest fixtures)::

    from deploy import Cassandra, ZooKeeper
    zk = ZooKeeper(tmp / "zk", nodes=3).start()    # blocks until serving
    zk.connect_string                             # "127.0.0.1:2181,..."
    zk.kill_node(zk.leader()); zk.start_node(2); zk.stop()
    cass = Cassandra(tmp / "cass", nodes=1, heap="512M").start()
    cass.contact_points                           # ["127.0.0.1"]
    cass.kill_node(3); cass.start_node(3); cass.stop()

Modules: ``tools`` (java, maven, jar fetch, CDS archive path), ``process``
(detached starts, liveness, ports), ``cql`` (a tiny CQL client), ``nodes`` (what
every cluster shares), ``zookeeper`` and ``cassandra`` (the two kinds; their
poms and JVM files are in the ``zookeeper/`` and ``cassandra/`` directories next
to them), ``cluster`` (a whole local shardcron cluster, ``make cluster``) and
``versitygw`` (the S3 gateway the blob store's tests use) and ``__main__`` (the
command line).
"""

from deploy.cassandra import Cassandra, ensure_cds_archive
from deploy.cql import Cql, cql_release_version
from deploy.errors import ServerError, log
from deploy.nodes import Cluster
from deploy.process import pid_alive, port_open, spawn_detached
from deploy.tools import ensure_tools, fetch
from deploy.versitygw import VersityGateway, fetch_versitygw
from deploy.zookeeper import ZooKeeper, zk_mode

__all__ = [
    "Cassandra",
    "Cluster",
    "Cql",
    "ServerError",
    "VersityGateway",
    "ZooKeeper",
    "cql_release_version",
    "ensure_cds_archive",
    "ensure_tools",
    "fetch",
    "fetch_versitygw",
    "log",
    "pid_alive",
    "port_open",
    "spawn_detached",
    "zk_mode",
]
