"""Where a worker's commands run: each in a cage of its own, kept by a supervisor.

Standard library only, and importable apart from the rest of shardcron: the worker's
fork server imports this package by its folder under ``python -I -S``, so that it
starts light. Its modules:

- ``cage``: ``RunCage``, the interface every kind of containment implements, with a
  run's ``Limits`` and what it ``Used``, and the file and process helpers they share;
- ``cgroup_v1``, ``cgroup_v2``: a cgroup per run, on either kind of hierarchy;
- ``process_tree``: the fallback where no cgroup hierarchy is writable (rlimits, and
  a subreaper that kills every descendant), whose limits are not enforced;
- ``hosts``: which kind a worker uses on this machine, the worker's own subtree of
  it, and the sweep of what workers that died left behind;
- ``supervisor``: a supervisor of runs, one after another, each time in the run's
  cage with its command;
- ``run_home``: a run's private directory (its ``HOME``, ``TMPDIR`` and secret files),
  made, emptied and kept for the supervisor's next run, or removed;
- ``forkserver``: the worker's helper process that forks the supervisors.
"""
