"""The GKE cluster and what runs on its nodes before the run: the cluster and its system pool
(gke_cluster.py), the nodes' service account (node_identity.py), the GPU pool (gpu_node_pool.py),
the gIB NCCL installer (nccl_installer.py), the NVIDIA DRA driver (nvidia_dra_driver.py), pinned
Helm releases (helm.py) and the cluster's kubeconfig (kubeconfig.py).

Imported by components/raycluster, components/preflight and __main__.py; it imports the facts,
the config's forms and components/schema below it."""
