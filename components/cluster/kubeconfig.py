"""How the program reaches a GKE cluster's API server: the kubeconfig and the provider's identity.

The kubeconfig is what the Kubernetes provider, the dynamic providers' `kubectl port-forward`
(components/run/ray_access.py and kube.py, which write it to a private temp file) and `make
logs`/`make curve` use; it reaches the DNS-based endpoint, or with `controlPlaneCidrs` the IP
endpoint (components/cluster/gke_cluster.py decides which). The provider's identity
(`provider_identity`) decides when pulumi-kubernetes replaces the provider and every object in
the cluster: when the cluster is replaced, never on a credential rotation.
"""

from __future__ import annotations

import hashlib

import pulumi
import pulumi_gcp as gcp

def cluster_identifier(project: str, region: str, cluster_name: str, ca_certificate: str) -> str:
    """The identifier's value as the provider is first created with it: the cluster's resource
    name and a digest of its CA at that moment. `provider_identity` keeps it from then on; the
    digest keeps it short and says nothing the state does not already hold."""
    digest = hashlib.sha256(ca_certificate.encode()).hexdigest()[:16]
    return f"projects/{project}/locations/{region}/clusters/{cluster_name}@ca-sha256:{digest}"


def endpoint_name(config: object) -> str | None:
    """The DNS endpoint's name from a read-back controlPlaneEndpointsConfig, or None where the
    state holds none (a replacement trigger of None triggers nothing)."""
    return getattr(getattr(config, "dns_endpoint_config", None), "endpoint", None) or None


def provider_identity(
    name: str, cluster: gcp.container.Cluster, project: str, region: str, cluster_name: str,
    parent: pulumi.Resource,
) -> pulumi.Output[str]:
    """The Kubernetes provider's clusterIdentifier: what it is replaced on, and on nothing else.

    Without one, pulumi-kubernetes replaces its provider, and with it every object in the
    cluster, whenever the kubeconfig's active cluster (server, CA) changes (DiffConfig,
    pulumi-kubernetes provider/pkg/provider/provider.go:545-560 @94977969d6), as moving from the
    IP to the DNS endpoint does. With one, a changed kubeconfig is an update, and only a changed
    identifier replaces (:486-503; an unknown one counts as changed).

    The value is the CA-digest identifier of the cluster as the provider first met it, kept in
    a Stash (`pulumi:index:Stash`): the builtin provider returns `output` = `input` on create
    and keeps the old `output` on every update (pulumi/pulumi pkg/resource/deploy/builtins.go
    :225-262 @1b5949891b), and `input` is ignored, so a credential rotation, which gives the
    cluster a new CA (cloud.google.com/kubernetes-engine/docs/how-to/credential-rotation),
    changes nothing. Before the Stash the identifier was computed from the live CA, so the first
    `pulumi up --refresh` after a rotation replaced every object in the cluster under the run.

    A cluster replaced under its name (a ForceNew field; delete first, components/options.py
    fixed_name) must still replace the provider, so that the objects are created again in the
    new, empty cluster. Two mechanisms say so, neither resting on the other:
    - the identifier also depends on the cluster's CA output, so the engine's dependent
      replacement of a delete-first replace sees it unknown and asks DiffConfig, which
      replaces (pulumi/pulumi step_generator.go:3295-3385, calculateDependentReplacements:
      inputs depending on the replaced resource become unknown); a preview of the replacement
      sees it unknown for the same reason;
    - the Stash's replacement trigger is the DNS endpoint's name, which GKE calls unique and
      immutable for the cluster's lifecycle (network-isolation docs): a new name replaces the
      Stash (step_generator.go:1797-1806, shouldTriggerReplace :3683-3698) and so gives the
      new cluster its own identifier, also when the cluster was recreated outside Pulumi and
      a refresh read it. A null name (a state without one) triggers nothing (:3692-3695).

    An existing stack gets the Stash on its next `up` with the value its provider already
    holds (the same formula, the same CA): a no-op for the provider. Stash and replacement
    triggers need a Pulumi CLI >= 3.208 (README).
    """
    ca = cluster.master_auth.cluster_ca_certificate
    stash = pulumi.Stash(
        f"{name}-k8s-identity",
        input=ca.apply(lambda c: cluster_identifier(project, region, cluster_name, c)),
        opts=pulumi.ResourceOptions(
            parent=parent,
            ignore_changes=["input"],
            replacement_trigger=cluster.control_plane_endpoints_config.apply(endpoint_name),
        ),
    )
    return pulumi.Output.all(stash.output, ca).apply(lambda values: values[0])


def dns_endpoint(config: object) -> str:
    """The cluster's DNS endpoint, e.g. gke-<id>.<region>.gke.goog, from its read-back
    controlPlaneEndpointsConfig: "Output only ... Always present" (GKE API container.v1
    discovery document, DNSEndpointConfig.endpoint; google-api-python-client 2.202.0
    discovery_cache/documents/container.v1.json:5079, revision 20261027), read into state by
    flattenDnsEndpointConfig (terraform-provider-google-beta @93c65b2d60
    google-beta/services/container/resource_container_cluster.go:8047-8058)."""
    endpoint = getattr(getattr(config, "dns_endpoint_config", None), "endpoint", None)
    if not endpoint:
        raise ValueError(
            "the GKE cluster read back no controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint, "
            "which the API always fills: run `pulumi refresh` and `pulumi up` again"
        )
    return endpoint


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str | None) -> str:
    """A kubeconfig that authenticates with gke-gcloud-auth-plugin, as `get-credentials` does.

    `ca_certificate` None: the DNS endpoint, which presents a publicly trusted certificate, so
    the kubeconfig names no CA, as `gcloud container clusters get-credentials --dns-endpoint`
    writes it (google-cloud-sdk googlecloudsdk/api_lib/container/kubeconfig.py `Cluster`: no
    certificate-authority-data `has_dns_endpoint`; util.py `ClusterConfig.Persist` passes it
    whenever the IP endpoints are disabled). The user entry is the same for both endpoints.

    It holds no token (the plugin fetches one per call), but it names the endpoint (and CA), so
    the program treats it as a secret anyway.
    """
    context = f"gke_{cluster_name}"
    authority = (
        [] if ca_certificate is None else [f"    certificate-authority-data: {ca_certificate}"]
    )
    return "\n".join(
        [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            f"- name: {context}",
            "  cluster:",
            *authority,
            f"    server: https://{endpoint}",
            "contexts:",
            f"- name: {context}",
            "  context:",
            f"    cluster: {context}",
            f"    user: {context}",
            f"current-context: {context}",
            "users:",
            f"- name: {context}",
            "  user:",
            "    exec:",
            "      apiVersion: client.authentication.k8s.io/v1beta1",
            "      command: gke-gcloud-auth-plugin",
            "      installHint: Install gke-gcloud-auth-plugin "
            "(gcloud components install gke-gcloud-auth-plugin)",
            "      provideClusterInfo: true",
            "",
        ]
    )
