"""The run: the GrpoJob component (grpo_job.py, its outputs listed once in job_outputs.py), its
dynamic provider (job_provider.py: what `up` submits or adopts in attempts.py, what it reports
while it waits in following.py, the export in export.py), the Ray dashboard access it shares
with the cluster check (ray_access.py, kube.py), the trackers' Secret (trackers.py) and the
RunSupervisor component that ships components/supervisor/ into the cluster (supervision.py).

Imported by components/check, __main__.py and the tools. It imports the run's config
(components/runspec) and the supervisor's shipped rules (components/supervisor) below it."""
