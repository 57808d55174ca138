"""TrackerCredentials: the experiment trackers' keys as a Kubernetes Secret for the Ray pods.

verl's trackers read their credentials from the environment (wandb: WANDB_API_KEY; mlflow:
MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN; verl/utils/tracking.py). The keys come from the
stack's secret config, go into this Secret (its data a Pulumi secret end to end), and reach
the Ray head and workers through `envFrom` (VerlRayClusterArgs.tracker_secret), so the raylet
and every Ray worker it starts inherit them. They are never part of the job's inputs, its
runtime env or the stack's plain state, and `ray job` shows none of them.

The Secret always exists, empty when no tracker needs a key, so the RayCluster's pod spec does
not change when a tracker is added (KubeRay does not restart running pods on a spec change).
It does not choose the trackers (`verl-gke:job.logger` does) or validate the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from components.options import child_options
from components.secrets import secret_data

SECRET_NAME = "verl-trackers"
LABELS = {"app.kubernetes.io/name": "verl-gke-trackers", "app.kubernetes.io/part-of": "verl-gke"}


@dataclass(frozen=True)
class TrackerCredentialsArgs:
    namespace: pulumi.Input[str]  # the Ray pods' namespace
    # Env var name -> value (components/schema/config.py tracker_env); wrapped as a secret here.
    env: Mapping[str, str]
    name: str = SECRET_NAME  # the Secret's name, referenced by the Ray pods


class TrackerCredentials(pulumi.ComponentResource):
    """The Secret; `secret_name` is what the RayCluster's `envFrom` refers to."""

    secret_name: pulumi.Output[str]
    keys: list[str]  # the env var names it holds (names only, never values)

    def __init__(
        self, name: str, args: TrackerCredentialsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:TrackerCredentials", name, None, opts)
        self.keys = sorted(args.env)
        secret = k8s.core.v1.Secret(
            f"{name}-secret",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=args.name, namespace=args.namespace, labels=LABELS
            ),
            type="Opaque",
            # `data`, not stringData, for the reasons components/secrets.py gives; none at all
            # when no tracker needs a key: the API server drops an empty map (`omitempty`), and
            # pulumi-kubernetes would send `{"data":{}}` again on every `up` (the merge patch of
            # the pruned live object, provider.go:2851-2864 @94977969d6; tools/readback.py).
            data={key: secret_data(value) for key, value in args.env.items()} or None,
            opts=child_options(self, opts, additional_secret_outputs=["data"]),
        )
        self.secret_name = secret.metadata.name
        self.register_outputs({"secretName": self.secret_name, "keys": self.keys})
