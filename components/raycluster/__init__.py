"""The RayCluster: its spec (ray_cluster_spec.py), the values the spec is made of
(ray_cluster_args.py) and the component that creates it, suspends and resumes it
(verl_ray_cluster.py).

Imported by __main__.py and the tools; it imports the cluster's and the storage's rooms below it,
never the run's: the run learns the RayCluster's name and pods as inputs."""
