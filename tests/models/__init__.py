"""One model per seam, shared by every test and by the simulation (TigerBeetle's src/testing/).

Each module models one system the program talks to, as the pinned release behaves, and cites
the upstream file and line each behaviour copies:

- ray_jobs.py: Ray's Jobs API and head (submit, duplicate id, stop, delete, list, logs, the
  job monitor, a head restart, a lost worker node), answered as REST replies; ray_gcs.py: the
  GCS's node and actor tables as the State API lists them. tests/test_sim_conformance.py runs
  the same script on this model and on a real local head and compares what each shows.
- kuberay.py: KubeRay's RayCluster (suspend, resume, head restart, worker replacement) and
  the API server's objects (merge patch, resourceVersion, 409, NotFound), behind kubectl and
  behind the in-cluster HTTPS API.
- verl.py: what the pinned verl's entrypoints do (components/facts/verl.py): the training's
  phases, steps, checkpoint saves and resume, the export, the cluster check.
- engine.py: the Pulumi engine's operation order over the run's resources (up, refresh,
  destroy), calling the real providers.

A model runs in a world that gives it a clock and schedules what happens later: tests/sim/
world.py (the simulation's, on a virtual clock, with drivers and faults) or tests/fakes/
ray_jobs.py's hand world (the tick-level tests', where nothing happens unless the test says so
and what Ray does by itself afterwards happens at once). The fronts the tests and the provider
process need (tests/fakes/: the client interface, the files kubectl and the supervisor share,
the kubectl and trainer executables) are thin and hold no behaviour of their own.
"""
