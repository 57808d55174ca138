"""NodeIdentity: the service account every node of the cluster runs as, with the least it needs.

GKE nodes otherwise run as the Compute Engine default service account, which holds Editor on the
project in many organisations: every pod that can reach the metadata server would act with it.
Cluster Toolkit's gke-node-pool and the terraform-google-kubernetes-engine module both create a
dedicated account instead. The roles are the ones GKE documents for a custom node account
("Use least privilege IAM service accounts", kubernetes-engine/docs/how-to/service-accounts):
- roles/container.defaultNodeServiceAccount: logging, monitoring, resource metadata and
  autoscaling metrics, as one role;
- roles/artifactregistry.reader: pull images from Artifact Registry;
- roles/serviceusage.serviceUsageConsumer: image streaming with a custom node service account
  (kubernetes-engine/docs/how-to/image-streaming, requirements).
Workloads never use this account: the Ray pods and the staging Job use workload identity
(components/storage/gcs_fuse_storage.py), and the nodes' metadata server is GKE_METADATA.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.options import child_options

NODE_ROLES = (
    "roles/container.defaultNodeServiceAccount",
    "roles/artifactregistry.reader",
    "roles/serviceusage.serviceUsageConsumer",
)
# Nodes authorise with IAM alone; the scope only lets every role's API through (GKE's
# recommendation for custom node service accounts).
OAUTH_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def node_baseline(
    service_account: pulumi.Input[str] | None, labels: dict[str, str]
) -> dict[str, object]:
    """NodePoolNodeConfigArgs settings every node of the stack runs with, GPU or system.

    Its identity (this account, cloud-platform scope), its Google Cloud labels, gVNIC, GKE's
    metadata server for workload identity, and image streaming with the node image it needs
    (Container-Optimized OS with containerd, GKE image-streaming requirements; stated rather
    than left to GKE's default image type): every node starts the ~25 GB verl image.
    """
    return dict(
        service_account=service_account,
        oauth_scopes=OAUTH_SCOPES,
        image_type="COS_CONTAINERD",
        resource_labels=labels or None,
        gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
        gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=True),
        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
            mode="GKE_METADATA"
        ),
    )


@dataclass(frozen=True)
class NodeIdentityArgs:
    project: str
    account_id: str  # 6-30 characters, unique per stack (components/schema/names.py)
    cluster_name: str  # for the account's display name


class NodeIdentity(pulumi.ComponentResource):
    email: pulumi.Output[str]

    def __init__(
        self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:NodeIdentity", name, None, opts)
        child = child_options(self, opts)
        account = gcp.serviceaccount.Account(
            f"{name}-account",
            gcp.serviceaccount.AccountArgs(
                project=args.project,
                account_id=args.account_id,
                display_name=f"GKE nodes of {args.cluster_name} (verl-gke)",
            ),
            # An account id is unique in the project and is reserved for a while after deletion:
            # the old account must go before a replacement claims the id.
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(delete_before_replace=True)
            ),
        )
        self.email = account.email
        member = account.email.apply(lambda email: f"serviceAccount:{email}")
        self.grants = [
            gcp.projects.IAMMember(
                f"{name}-{role.split('/')[-1].replace('.', '-').lower()}",
                gcp.projects.IAMMemberArgs(project=args.project, role=role, member=member),
                opts=child,
            )
            for role in NODE_ROLES
        ]
        self.register_outputs({"email": self.email})
