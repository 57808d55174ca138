"""The cluster check: the dynamic resource that runs one Ray job on the RayCluster before any
training attempt (cluster_check.py) and the job's script (cluster_check_script.py, which runs
on the Ray pods and imports only what their image has).

Imported by __main__.py and the tools; it imports the run's Ray access (components/run) below it."""
