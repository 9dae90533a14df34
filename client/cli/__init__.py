"""The user-facing ``shardcron`` commands: jobs, runs, dead letters and cluster status.

``cli`` is the click group the ``shardcron`` program runs; the program module adds its
``dev``, ``node``, ``worker`` and ``store`` commands to it and finds the global options
in ``ctx.find_object(CliState)``. Commands parse, call the SDK and print: aligned
tables for people, one JSON document with ``--json``. A server error prints
``error: CODE: message`` on stderr and exits 2 (INVALID_ARGUMENT), 3 (NOT_FOUND), 4
(ABORTED, ALREADY_EXISTS, FAILED_PRECONDITION) or 1, never a traceback. Importing this
package connects to nothing.

The parts, each readable alone:

- ``root``: the group, its global options and the error exits;
- ``state``: ``CliState``, what every command receives (options, client, ``emit``);
- ``params``: the value types of flags (times, durations, ``KEY=VALUE``, enums);
- ``job_options``: the job flags, declared once for create, update and preview, and
  ``apply_options``, which turns them into a spec;
- ``jobs``, ``runs``, ``dead_letters``, ``cluster``: the command groups;
- ``output``: JSON and the tables people read.
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
