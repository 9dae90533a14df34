"""The user-facing ``shardcron`` commands: jobs, runs, dead letters and cluster status.

``cli`` is the click group the ``shardcron`` program runs; the program module adds its
``dev``, ``node``, ``worker`` and ``store`` commands to it and finds the global options
in ``ctx.find_object(CliState)``. Commands parse, call the SDK and print: aligned
tables for people (at most 120 columns), one JSON document with ``--json``. A server
error prints ``error: CODE: message`` on stderr (with ``--json``, a JSON document) and
exits 2 (INVALID_ARGUMENT), 3 (NOT_FOUND), 4 (ABORTED, ALREADY_EXISTS,
FAILED_PRECONDITION) or 1, never a traceback; Ctrl-C exits 130. Importing this package
connects to nothing.

The parts, each readable alone:

- ``root``: the group, the error exits, Ctrl-C;
- ``root_options``: the root options, declared once, and their copies accepted after
  the subcommand;
- ``state``: ``CliState``, what every command receives (options, client, ``emit``);
- ``params``: the value types of flags (times, durations, ``KEY=VALUE``, enums);
- ``job_options``: the job flags, declared once for create, update and preview, and
  ``apply_options``, which turns them into a spec;
- ``jobs``, ``runs``, ``dead_letters``, ``cluster``, ``completion``: the commands;
- ``lookups``: a job's first or latest run, the run a run id or job id names, last
  outcomes, a run followed through its retries; ``waiting``: ``run wait`` and
  ``job create --wait``;
- ``output`` and ``times``: JSON and the tables people read; times in a job's zone.
"""

from shardcron.client.cli.job_options import JobOptions, apply_options, spec_from_options
from shardcron.client.cli.output import to_jsonable
from shardcron.client.cli.params import parse_time
from shardcron.client.cli.root import EXIT_CODES, cli
from shardcron.client.cli.state import CliState

__all__ = [
    "EXIT_CODES",
    "CliState",
    "JobOptions",
    "apply_options",
    "cli",
    "parse_time",
    "spec_from_options",
    "to_jsonable",
]
