"""A real HTTP receiver of webhook notifications, for tests: a threaded server on
127.0.0.1 that records every request (its headers and exact body) and answers each
with the next status of a script (the last one repeated), or holds the answer while
``hold`` is set."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what it was answered (0: never answered)

    @property
    def record(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self, statuses: tuple[int, ...] = (200,)) -> None:
        self.statuses = list(statuses)
        self.received: list[Received] = []
        self.hold = threading.Event()  # set: requests get no answer until cleared
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    held = receiver.hold.is_set()
                    status = 0 if held else receiver._next_status()
                    receiver.received.append(Received(self.path, headers, body, status))
                if held:
                    while receiver.hold.is_set():
                        receiver.hold.wait(0.05)
                        if not receiver.hold.is_set():
                            break
                    return  # the connection ends without an answer
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _next_status(self) -> int:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.hold.clear()
        self.server.shutdown()
        self.server.server_close()

    def of(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]
