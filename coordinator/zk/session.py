"""One ZooKeeper session: its connection states, its generation, and the clock
that says whether what it holds may still be acted on.

What it guarantees:

- CONNECTED: requests go through and the session's ephemeral nodes are held.
- SUSPENDED (the connection dropped; the session may live on): ``connected`` is
  false at once, and the state hooks make the node stop trusting what it owns
  (the poller goes inactive). Nothing is given up: the session may come back
  with every node it held.
- LOST (the session expired, or the client closed): every ephemeral node of the
  session is gone. ``generation`` moves on, so work decided in the old session is
  not acted on in the new one: it raises ``SessionChanged`` and starts over.
- ``ownership_valid()`` is true only while a round trip sent on this session, in
  this generation, came back within half a session timeout: a process frozen or
  cut off longer than that stops acting on its shards before its session can
  expire and another poller own them, however long kazoo takes to notice.
- The operations here (``create_ephemeral``, ``delete_own``, ``bump``) are
  idempotent, and ``retry`` retries them for at most one session timeout and
  never across a session expiry: work belongs to the session that started it.

``lock`` guards ``connected`` and ``generation`` (and, for the assignment feed,
the order in which assignments are queued to the loop); the state hooks run
under it on kazoo's connection thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import ForceRetryError, KazooRetry

from shardcron.client.errors import Unavailable
from shardcron.coordinator.zk.layout import Watch, dump, load

log = logging.getLogger("shardcron.coordination")

T = TypeVar("T")

StateHook = Callable[[str], None]


class SessionChanged(Exception):
    """The session this work started in is gone; start over in the new one."""


@dataclass(frozen=True, slots=True)
class _Confirmation:
    """A round trip sent at ``sent_at`` (monotonic) that came back on the session
    of ``generation``."""

    generation: int
    sent_at: float


class Session:
    """The kazoo client of one node and the state of its session."""

    def __init__(self, hosts: str, *, node_id: str, timeout: float, probe_path: str) -> None:
        self.hosts = hosts
        self.node_id = node_id
        self.timeout = timeout
        self._probe_path = probe_path
        self.lock = threading.Lock()
        self.connected = False  # guarded by lock
        self.generation = 0  # guarded by lock; bumped at every LOST session
        # Set once the node leaves: retries give up and the threads end.
        self.stopping = threading.Event()
        self._hooks: list[StateHook] = []
        self._client: KazooClient | None = None
        # Written by the confirmer thread alone, read by anyone.
        self._confirmed = _Confirmation(generation=-1, sent_at=-math.inf)

    def on_state(self, hook: StateHook) -> None:
        """Adds a hook called with every new state, under ``lock`` on kazoo's
        connection thread, after ``connected`` and ``generation`` changed: it must
        not block nor take ``lock``. Add hooks before ``open``."""
        self._hooks.append(hook)

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise RuntimeError("not started")
        return self._client

    @property
    def opened(self) -> bool:
        return self._client is not None

    def open(self) -> None:
        """Connects and opens the session. Raises ``Unavailable``."""
        client = KazooClient(
            hosts=self.hosts,
            timeout=self.timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
        )
        client.add_listener(self.handle_state)
        try:
            client.start(timeout=self.timeout)
        except KazooTimeoutError as e:
            raise Unavailable(f"cannot reach ZooKeeper at {self.hosts}") from e
        self._client = client

    def start_confirming(self) -> None:
        threading.Thread(
            target=self._run_confirmer, name=f"zk-confirm-{self.node_id}", daemon=True
        ).start()

    def close(self) -> None:
        """Closes the session: whatever it still holds goes now."""
        client = self.client
        client.stop()
        client.close()

    def discard(self) -> None:
        """Closes a session that never finished starting; the node stays unstarted."""
        self.close()
        self._client = None

    # --- states -------------------------------------------------------------------

    def handle_state(self, state: str) -> None:
        """kazoo's state listener (its connection thread): must not block. Tests
        call it to play a state change."""
        with self.lock:
            if state == KazooState.CONNECTED:
                self.connected = True
            elif state == KazooState.SUSPENDED:
                self.connected = False
            else:  # LOST: every ephemeral of the old session is gone
                self.connected = False
                self.generation += 1
            for hook in self._hooks:
                hook(state)
        if not self.stopping.is_set():
            log.info("coordination: %s session %s", self.node_id, str(state).lower())

    def check(self, generation: int) -> None:
        """Raises ``SessionChanged`` unless session ``generation`` is the current one."""
        with self.lock:
            if generation != self.generation:
                raise SessionChanged()

    def ownership_valid(self) -> bool:
        """True while a round trip on this session came back within half a session
        timeout (see the module docstring)."""
        confirmed = self._confirmed
        return (
            confirmed.generation == self.generation
            and time.monotonic() < confirmed.sent_at + self.timeout / 2
        )

    def _run_confirmer(self) -> None:
        interval = self.timeout / 6
        while True:
            client = self._client
            if client is not None and self.connected:
                sent = time.monotonic()
                generation = self.generation
                session = self.session_id()
                try:
                    client.exists(self._probe_path)
                    if self.connected and self.session_id() == session:
                        self._confirmed = _Confirmation(generation=generation, sent_at=sent)
                except Exception as e:
                    log.debug("coordination: %s confirm failed: %r", self.node_id, e)
            if self.stopping.wait(interval):
                return

    # --- operations -----------------------------------------------------------------

    def session_id(self) -> int:
        client_id = self.client.client_id
        return client_id[0] if client_id else 0

    def retry(
        self, fn: Callable[..., T], *args: Any, interruptible: bool = True, **kwargs: Any
    ) -> T:
        """Calls ``fn`` (idempotent by construction) until it gets through, for at
        most one session timeout. A session expiry is not retried: the work
        belongs to the session that started it. ``interruptible``: give up once
        the node is stopping."""
        retry = KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_delay=0.5,
            deadline=self.timeout,
            ignore_expire=False,
            interrupt=self.stopping.is_set if interruptible else None,
        )
        return retry(fn, *args, **kwargs)

    def create_ephemeral(self, path: str, data: bytes, watch: Watch) -> bool:
        """Creates ``path`` for this session; False (and ``watch`` set on the node)
        when another session holds it. Idempotent under retry: a retried create
        that finds this session's node counts it as created."""
        zk = self.client

        def attempt() -> bool:
            try:
                zk.create(path, data, ephemeral=True)
                return True
            except NodeExistsError:
                stat = zk.exists(path, watch=watch)
                if stat is None:
                    raise ForceRetryError() from None
                return stat.ephemeralOwner == self.session_id()

        return self.retry(attempt)

    def delete_own(self, path: str) -> None:
        """Deletes ``path`` if this session holds it (idempotent)."""
        zk = self.client
        stat = zk.exists(path)
        if stat is None or stat.ephemeralOwner != self.session_id():
            return
        try:
            zk.delete(path, version=stat.version)
        except NoNodeError:
            pass

    def bump(self, path: str, key: str) -> tuple[int, int]:
        """Adds one to the counter ``key`` in ``path`` (version-checked); returns
        the new value and the node's version. Idempotent under retry: the write
        carries a token, so a retry that finds its own write does not add again."""
        zk = self.client
        token = uuid.uuid4().hex

        def attempt() -> tuple[int, int]:
            data, stat = zk.get(path)
            current = load(data)
            if current.get("token") == token:
                return int(current[key]), stat.version
            value = int(current.get(key, 0)) + 1
            try:
                written = zk.set(
                    path,
                    dump({key: value, "by": self.node_id, "token": token}),
                    version=stat.version,
                )
            except BadVersionError:
                raise ForceRetryError() from None
            return value, written.version

        return self.retry(attempt)
