"""A deterministic, in-memory world for the run's lifecycle (docs/run-lifecycle.md, "The
simulation"): a virtual clock, the CronJob, the seams' routing, the invariants and the
exploration, over the one model of each seam in tests/models/ (Ray 2.49's Jobs and State APIs,
KubeRay v1.7.0's RayCluster and the Kubernetes objects, verl, the Pulumi engine's operation
order). The program's own provider and supervisor code runs in it, unchanged, through the seams
it uses in production (requests, urllib, kubectl, time).
"""
