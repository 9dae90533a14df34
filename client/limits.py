"""Every bound on what a user may send, written once: the server validates against these,
the CLI takes its flag ranges from them, and the proto comments state them.

The bounds are generous for real use and far inside what Python's ``datetime`` and
``timedelta`` and protobuf can hold: a timestamp lies in [``EARLIEST_TIME``,
``LATEST_TIME``) and a duration in [0, ``MAX_DURATION``], so adding any allowed duration
(a jitter, a timeout, a starting deadline, a backoff) to any allowed time, or to any fire
of a schedule (fires stop before ``LATEST_TIME``), stays below year 9100 and cannot
overflow. Numbers stay inside int32 (protobuf's narrowest integer here) and, for
versions and offsets, inside the integers a JSON double holds exactly.

``clip`` is what an error message may echo of a string a user sent, so that no reply
outgrows the gRPC trailer (8 KiB) whatever was sent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# --- times
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)  # inclusive
LATEST_TIME = datetime(9000, 1, 1, tzinfo=UTC)  # exclusive
MAX_DURATION = timedelta(days=3653)  # ten years, leap days included
MIN_INTERVAL = timedelta(seconds=1)

# --- retry
MAX_ATTEMPTS = 100  # retry.max_attempts lies in [1, MAX_ATTEMPTS]; the default (RetryPolicy) is 3
MAX_MULTIPLIER = 100.0  # retry.multiplier lies in [1, MAX_MULTIPLIER]

# --- numbers
MAX_PRIORITY = 1_000_000  # |priority| at most this
MAX_SLOTS = 10_000  # resources.slots
MAX_CPU_MILLIS = 1_000_000  # resources.cpu_millis: a thousand cores
MAX_MEMORY_MB = 16 << 20  # resources.memory_mb: 16 TiB
MAX_OUTPUT_LIMIT = 1 << 40  # resources.output_limit_bytes, and a node's --output-limit
MAX_PIDS_LIMIT = 32_768  # resources.pids_limit; 0 means the worker's DEFAULT_PIDS_LIMIT
DEFAULT_PIDS_LIMIT = 1024  # processes a command's run may have at once unless its job says
MAX_CONCURRENT = 100_000  # concurrency.max_concurrent
MAX_PAUSE_AFTER_FAILURES = 1_000_000
MAX_VERSION = (1 << 53) - 1  # expected_version: exact in a JSON double
MAX_OUTPUT_OFFSET = (1 << 53) - 1  # |ReadRunOutputRequest.offset|
MAX_PAGE_SIZE = 1000  # larger page sizes read as this; 0 reads as DEFAULT_PAGE_SIZE
DEFAULT_PAGE_SIZE = 100
MAX_PREVIEW_COUNT = 1000
MAX_BATCH = 10_000  # jobs per CreateJobs
MAX_RUN_IDS = 1000  # run ids per dead-letter request

# --- strings (characters unless said otherwise); none may hold a NUL character
MAX_ID = 128  # job, run and worker ids
MAX_NAME = 200  # job name, name_prefix
MAX_IDEMPOTENCY_KEY = 200
MAX_HANDLER_NAME = 200
MAX_TIMEZONE = 64
MAX_CRON = 256
MAX_PAGE_TOKEN = 1024
MAX_CWD = 4096  # PATH_MAX
MAX_ARGV_BYTES = 128 << 10  # UTF-8 bytes of all of argv together
MAX_ENV_BYTES = 128 << 10  # UTF-8 bytes of every env key and value together
MAX_PAYLOAD = 1 << 20  # handler payload bytes
MAX_LABELS = 64  # per map (job labels, resource labels, list filters, a worker's labels)
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 256

# --- what a worker says of itself (its Hello; the cluster status lists it)
MAX_WORKER_HANDLERS = 1000  # handler names, each at most MAX_HANDLER_NAME
MAX_WORKER_VERSION = 64  # Hello.version; worker_id and instance_id are ids (MAX_ID)

# --- what errors echo
# --- a run's result files ($SHARDCRON_RESULT_DIR): what a worker sends of one run
MAX_RESULT_FILES = 100
MAX_RESULT_FILE_BYTES = 64 << 20
MAX_RESULT_BYTES = 256 << 20  # all of one run's result files together
MAX_RESULT_NAME = 255  # a plain file name of the blob key alphabet (``is_result_name``)
MAX_RESULTS_NOTE = 2000  # characters of what a run's note on its result files says

MAX_ECHO = 64  # characters of a user's string an error message quotes
MAX_ERROR_MESSAGE = 500  # characters of a status message: < 8 KiB even percent-encoded


def clip(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` as an error may quote it: at most ``limit`` characters, with how long it
    really was when cut (``"xxxx…(10000 chars)"``)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} chars)"


_RESULT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")


def is_result_name(name: str) -> bool:
    """A result file's name: 1 to ``MAX_RESULT_NAME`` ASCII letters, digits, ``.``,
    ``_``, ``-`` and ``@``, starting with a letter or a digit (one segment of the blob
    key alphabet, so it names the same file on every store and is no path)."""
    return (
        0 < len(name) <= MAX_RESULT_NAME
        and name[0].isascii()
        and name[0].isalnum()
        and all(c in _RESULT_NAME_CHARS for c in name)
    )
