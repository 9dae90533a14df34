"""Where, and as whom, one worker's commands run: its containment (a cgroup per run,
or the fallback), its runs' users, their private directories, and the fork server of
their supervisors. ``Sandbox.open`` sets them up once when the worker starts, sweeps
what workers that died left, and says in the worker's log which containment and users
it uses (with one warning when its runs' limits cannot be enforced).

Per run: ``place`` names the run's cage and directory and picks its user, and gives
the environment it adds (``HOME`` when the run has a user of its own, ``TMPDIR``,
``SHARDCRON_RESULT_DIR``,
``SHARDCRON_SECRETS_DIR`` when the job has secrets); ``launch`` starts its supervisor
(``containment.supervisor``) with the rest. ``abandoned`` cleans up after a supervisor
that went away without doing so (its cage is killed and removed as soon as the worker
sees it gone).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcron.client.limits import DEFAULT_PIDS_LIMIT
from shardcron.client.types import CommandTask, Resources

from .artifacts import DEFAULT_CACHE_BYTES
from .containment.hosts import Containment, Unusable, choose, run_name, worker_subtree
from .containment.results import outbox_of
from .containment.run_home import remove_tree
from .containment.unpack import WORK_DIR
from .run_users import FixedUser, OwnerUids, OwnUser, RunDirs, RunUser, RunUsers, default_run_dir
from .supervisor_client import Supervised, Supervisors

log = logging.getLogger(__name__)

MIB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxConfig:
    """How a worker contains its commands (``shardcron worker``'s flags).

    ``containment``: ``auto`` (cgroup v2, else v1, else none), or one of them by name;
    ``run_as``: one user (name or uid) for every command; ``run_as_range``: a uid of its
    own for each owner, out of (first, last); neither: the worker's own user.
    ``run_dir``: where the runs' private directories and the owners' uid map live
    (default ``/var/lib/shardcron/runs`` as root, else one in the temporary directory).
    ``default_pids``: a run's process limit when its job sets none. ``artifact_cache``
    and ``artifact_cache_bytes``: where, and how much of, jobs' code archives are cached."""

    containment: str = "auto"
    run_as: str | None = None
    run_as_range: tuple[int, int] | None = None
    run_dir: Path | None = None
    default_pids: int = DEFAULT_PIDS_LIMIT
    artifact_cache: Path | None = None  # None: RUN_DIR/artifact-cache
    artifact_cache_bytes: int = DEFAULT_CACHE_BYTES

    def artifact_cache_dir(self) -> Path:
        """Where jobs' code archives are cached (``worker.artifacts``)."""
        return self.artifact_cache or (self.run_dir or default_run_dir()) / "artifact-cache"


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where one run lives: its name (its directory's), its directory, its user,
    and what it adds to the command's environment."""

    name: str
    home: str
    user: RunUser | None
    env: dict[str, str] = field(default_factory=dict)


class Sandbox:
    """The containment of one worker's commands (module docstring)."""

    def __init__(self, config: SandboxConfig, worker_id: str, instance: str = "") -> None:
        self.config = config
        self.worker_id = worker_id
        self.instance = instance  # tells apart two workers of one id in one process
        self.containment: Containment | None = None
        self.users: RunUsers = OwnUser()
        self.dirs: RunDirs | None = None
        self.supervisors = Supervisors(abandon=self._abandon_cage)

    @property
    def opened(self) -> bool:
        return self.containment is not None

    def open(self) -> None:
        """Chooses the containment and users, makes this worker's subtrees, sweeps what
        dead workers left, and logs what it uses. Raises ValueError for a configuration
        this host cannot give (users without root, a containment asked for by name).
        Once opened, opening again does nothing."""
        if self.opened:
            return
        config = self.config
        name = f"{self.worker_id}.{self.instance[:8]}" if self.instance else self.worker_id
        subtree = worker_subtree(name)
        run_dir = config.run_dir or default_run_dir()
        if config.run_as is not None and config.run_as_range is not None:
            raise ValueError("--run-as and --run-as-range exclude each other")
        if config.run_as is not None:
            self.users = FixedUser(config.run_as)
        elif config.run_as_range is not None:
            self.users = OwnerUids(*config.run_as_range, map_path=run_dir / "uids")
        if self.users.separate and os.geteuid() != 0:
            raise ValueError("running commands as other users needs root")
        try:
            containment, passed_over = choose(config.containment, subtree)
        except Unusable as e:
            raise ValueError(f"containment {config.containment}: {e}") from e
        dirs = RunDirs(run_dir, subtree)
        dirs.prepare()
        swept = containment.sweep() + dirs.sweep()
        if swept:
            log.info("removed what workers that died left: %s", ", ".join(sorted(set(swept))))
        self.containment, self.dirs = containment, dirs
        log.info(
            "worker %s: commands run contained by %s; %s; private directories in %s",
            self.worker_id,
            containment.where,
            self.users.describe(),
            dirs.base,
        )
        if not containment.enforced:
            log.warning(
                "worker %s: no cgroup hierarchy it can write (%s): each run gets rlimits and "
                "a subreaper that kills every process it leaves, but its memory, CPU and "
                "process limits are NOT enforced, and each run records that",
                self.worker_id,
                "; ".join(passed_over) or "none asked for",
            )

    def place(self, run_id: str, fencing_token: int, owner: str, task: CommandTask) -> RunPlace:
        """Where the run of this lease lives, and the environment that says so."""
        assert self.dirs is not None, "Sandbox.open first"
        name = run_name(run_id, fencing_token)
        home = self.dirs.home(name)
        user = self.users.user_for(owner)
        env = {"TMPDIR": f"{home}/tmp", "SHARDCRON_RESULT_DIR": f"{home}/results"}
        if user is not None:
            env["HOME"] = home
        if task.secret_env:
            env["SHARDCRON_SECRETS_DIR"] = f"{home}/secrets"
        return RunPlace(name=name, home=home, user=user, env=env)

    async def launch(
        self,
        place: RunPlace,
        task: CommandTask,
        env: dict[str, str],
        resources: Resources | None,
        deadline: float | None,
        *,
        archive: str | None = None,
    ) -> Supervised:
        """Starts the run's supervisor; OSError when it cannot. ``archive``: the path of
        the run's artifact, which the supervisor unpacks into ``HOME/work`` (the
        command's working directory unless its task names one) before the command."""
        assert self.containment is not None, "Sandbox.open first"
        res = resources or Resources()
        work = f"{place.home}/{WORK_DIR}" if archive is not None else ""
        config: dict[str, Any] = {
            "argv": list(task.argv),
            "env": env,
            "cwd": task.cwd or work,
            "artifact": archive,
            "uid": None if place.user is None else place.user.uid,
            "gid": None if place.user is None else place.user.gid,
            "home": place.home,
            "secrets": dict(task.secret_env),
            "containment": self.containment.describe(),
            "name": place.name,
            "limits": {
                "memory_bytes": res.memory_mb * MIB,
                "cpu_millis": res.cpu_millis,
                "pids": res.pids_limit or self.config.default_pids,
            },
            "deadline": deadline,
            "results": list(res.results.bounds()),
        }
        return await self.supervisors.launch(config)

    def abandoned(self, place: RunPlace) -> None:
        """The run's supervisor went away without ending it (its cage is killed and
        removed as the worker learns it is gone): remove its directory from here."""
        for path in (place.home, outbox_of(place.home)):
            with contextlib.suppress(FileNotFoundError):
                remove_tree(path)

    def _abandon_cage(self, name: str) -> None:
        """A supervisor exited: kill and remove its cage, if it left one (it died)."""
        if self.containment is None:
            return
        try:
            self.containment.abandon(name)
        except OSError as e:
            log.error("cage %s: it could not be killed and removed: %s", name, e)

    async def close(self) -> None:
        await self.supervisors.close()
        if self.containment is not None:
            self.containment.close()
        if self.dirs is not None:
            self.dirs.close()
