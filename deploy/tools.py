"""Java, Maven and the server jars: find or install the tools, fetch the jars once.

The jars come from Maven Central through the throwaway poms in ``deploy/<kind>/``
(the pom is the single source of each version) and land in
``$SHARDCRON_CACHE/lib/<kind>-<version>/`` (default ``~/.cache/shardcron``). A fetch
is complete only when its marker holds the digest of the current pom, so an
interrupted fetch, or an edited pom, is fetched again. Also here: the Cassandra
classpath and the path of its class-data-sharing archive, both derived from the
fetched jars.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from deploy.errors import ServerError, log

DEPLOY_DIR = Path(__file__).resolve().parent
KINDS = ("zookeeper", "cassandra")
COMPLETE_MARKER = ".complete"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


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
        raise ServerError("no java >= 17 found: run `python3 -m deploy ensure-tools`")
    return java


def ensure_tools() -> None:
    """Install a JRE 17, Maven and openssl with apt-get, only when they are missing.

    CI images may lack them; developer machines usually have them, and then this
    does nothing (no apt-get run at all).
    """
    missing = []
    if not find_java():
        missing.append("openjdk-17-jre-headless")
    if not shutil.which("mvn"):
        missing.append("maven")
    if not shutil.which("openssl"):
        missing.append("openssl")  # deploy.certs makes the cluster's certificates with it
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
    if not find_java() or not shutil.which("mvn") or not shutil.which("openssl"):
        raise ServerError("apt-get finished but java >= 17, mvn or openssl is still missing")


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
        raise ServerError("mvn not found: run `python3 -m deploy ensure-tools`")
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
