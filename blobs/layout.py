"""Where each kind of blob lives: the key layout every caller builds its keys with.

::

    output/<owner>/<run_id>/<fencing_token>/<stream>/<part>   a run's output, in parts
    results/<owner>/<run_id>/<name>                           a run's result files
    artifacts/<owner>/<sha256>                                a job's code, by digest

The kind comes first and the owner second in every key, so one owner's blobs of a
kind are exactly the keys under ``<kind>/<owner>/`` (``owner_prefix``), and a key
names its owner (``owner_of``): a reader checks that owner against its caller's
before it reads. Each part is checked to be one segment of the key alphabet
(``shardcron.blobs.keys``) before a key is built, so no owner, run id or name can
hold a ``/`` and reach into another owner's keys, and no prefix of one owner's
folder is another's (every prefix built here ends with ``/``).

The numbers are zero-padded to a fixed width, so a listing, which is in key order,
is in number order: a run's attempts by fencing token (a later lease has a larger
token, so a stale attempt writes under its own token and can never overwrite a
newer attempt's parts), each stream's parts in order. Each kind's keys have a fixed
depth, so no key is ever both a blob and the folder of others.
"""

from __future__ import annotations

from enum import StrEnum

from shardcron.blobs.errors import InvalidBlobKey
from shardcron.blobs.keys import check_key, check_segment, check_sha256
from shardcron.client.limits import MAX_ID, clip

MAX_OWNER = 128  # the owners' own bound (``coordinator.validation.validate_owner``)
MAX_FENCING_TOKEN = (1 << 64) - 1
MAX_PART = 10**10 - 1
_TOKEN_DIGITS = 20  # len(str(MAX_FENCING_TOKEN))
_PART_DIGITS = 10


class BlobKind(StrEnum):
    OUTPUT = "output"
    RESULTS = "results"
    ARTIFACTS = "artifacts"


_KINDS = frozenset(k.value for k in BlobKind)


class OutputStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


def owner_prefix(kind: BlobKind, owner: str) -> str:
    """``<kind>/<owner>/``: every blob of that kind of one owner, and no other's."""
    return f"{BlobKind(kind)}/{_owner(owner)}/"


def output_prefix(owner: str, run_id: str, fencing_token: int | None = None) -> str:
    """A run's output: every attempt's, or (with ``fencing_token``) one attempt's."""
    prefix = f"{owner_prefix(BlobKind.OUTPUT, owner)}{_run(run_id)}/"
    return prefix if fencing_token is None else f"{prefix}{_token(fencing_token)}/"


def output_stream_prefix(owner: str, run_id: str, fencing_token: int, stream: str) -> str:
    """The parts of one stream of one attempt, listed in part order."""
    return f"{output_prefix(owner, run_id, fencing_token)}{_stream(stream)}/"


def output_part_key(owner: str, run_id: str, fencing_token: int, stream: str, part: int) -> str:
    """Part ``part`` (from 0) of ``stream`` of the attempt holding ``fencing_token``."""
    prefix = output_stream_prefix(owner, run_id, fencing_token, stream)
    return check_key(prefix + _number(part, "part", MAX_PART, _PART_DIGITS))


def results_prefix(owner: str, run_id: str) -> str:
    return f"{owner_prefix(BlobKind.RESULTS, owner)}{_run(run_id)}/"


def result_key(owner: str, run_id: str, name: str) -> str:
    """The result file ``name`` of a run: a plain file name of the key alphabet."""
    return check_key(results_prefix(owner, run_id) + check_segment(name, "name"))


def artifact_key(owner: str, sha256: str) -> str:
    """An owner's artifact with that digest (64 lowercase hex digits): stored once."""
    return check_key(owner_prefix(BlobKind.ARTIFACTS, owner) + check_sha256(sha256))


def owner_of(key: str) -> str:
    """The owner a key of this layout belongs to; ``InvalidBlobKey`` for any other key."""
    kind, _, rest = check_key(key).partition("/")
    owner, _, below = rest.partition("/")
    if kind not in _KINDS or not below:
        raise InvalidBlobKey("key", f"{clip(key)!r} is not an output, results or artifacts key")
    return _owner(owner)


def _owner(owner: str) -> str:
    return check_segment(owner, "owner", limit=MAX_OWNER)


def _run(run_id: str) -> str:
    return check_segment(run_id, "run_id", limit=MAX_ID)


def _stream(stream: str) -> str:
    try:
        return OutputStream(stream).value
    except ValueError:
        raise InvalidBlobKey("stream", f"{clip(str(stream))!r} is not stdout or stderr") from None


def _token(token: int) -> str:
    return _number(token, "fencing_token", MAX_FENCING_TOKEN, _TOKEN_DIGITS)


def _number(value: int, field: str, most: int, digits: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise InvalidBlobKey(field, f"{clip(str(value))!r} is not an integer in [0, {most}]")
    return f"{value:0{digits}d}"
