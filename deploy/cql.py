"""Just enough of the CQL native protocol (v4) to ask a Cassandra node a question.

A node is ready when it answers a real query (a listening port is not a serving
node), and the check must work with the standard library alone, before the
virtualenv and its cassandra-driver exist. Only the column types the health and
gossip queries return are decoded; other values stay raw bytes.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import uuid

from deploy.errors import ServerError


class Cql:
    """A connection that has said STARTUP; ``query`` runs one statement at ONE."""

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
