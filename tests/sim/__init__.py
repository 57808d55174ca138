"""A deterministic, in-memory world for the run's lifecycle (docs/run-lifecycle.md, "The
simulation"): a virtual clock, Ray 2.47's Jobs and State APIs, KubeRay v1.7.0's RayCluster, the
Kubernetes objects the supervisor and the provider share, verl and its export, the CronJob and
the Pulumi engine's operation order. The program's own provider and supervisor code runs in it,
unchanged, through the seams it uses in production (requests, urllib, kubectl, time).
"""
