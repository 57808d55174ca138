"""Exactly what the supervisor's CronJob pod runs (components/run/supervision.py CODE_PATHS):
the rules the supervisor shares with the job's provider (protocol.py, and recovery.py: what
follows an attempt that ended without success), the run's state as a type and the transitions
that write the supervisor's record (run_state.py), a tick (supervisor.py), what it does after
the run (supervisor_end.py) and its I/O (supervisor_io.py).

Standard library only, and each other's files plus components/facts/verl.py, which is shipped
beside them (tests/test_layout.py fails on any other import): the pod's image is a plain Python.
This file is not shipped (the pod imports the folder as a namespace package). Imported by
components/run (the provider decides through the same rules) and by the tests."""
