"""How the program reaches a GKE cluster's API server: the kubeconfig and the provider's identity.

The kubeconfig is what the Kubernetes provider, the dynamic providers' `kubectl port-forward`
(components/ray/ray_access.py and kube.py, which write it to a private temp file) and `make
logs`/`make curve` use; it reaches the DNS-based endpoint, or with `controlPlaneCidrs` the IP
endpoint (components/cluster/gke_cluster.py decides which).
"""

from __future__ import annotations

import hashlib

def cluster_identifier(project: str, region: str, cluster_name: str, ca_certificate: str) -> str:
    """What the Kubernetes provider is replaced on, and on nothing else: this cluster, as one
    instance (its resource name and a digest of its CA).

    Without it, pulumi-kubernetes replaces its provider, and with it every object in the
    cluster, whenever the kubeconfig's active cluster (server, CA) changes (DiffConfig,
    pulumi-kubernetes provider/pkg/provider/provider.go:545-560 @94977969d6), as moving from the
    IP to the DNS endpoint does. With it, a changed kubeconfig is an update, and only a changed
    identifier replaces (:486-503, which also covers an unknown kubeconfig at preview,
    :505-516). The name alone would not do: a cluster replaced under the same name (a ForceNew
    field, delete first) must still replace the provider, so that the objects are created again
    in the new, empty cluster; the DNS-endpoint kubeconfig holds no CA to show it. A new
    cluster has a new CA (master_auth.cluster_ca_certificate, Computed, read from
    MasterAuth.clusterCaCertificate), unknown at the preview of its replacement, which makes
    DiffConfig replace; an in-place update keeps it. The digest keeps the identifier short and
    says nothing the state does not already hold.
    """
    digest = hashlib.sha256(ca_certificate.encode()).hexdigest()[:16]
    return f"projects/{project}/locations/{region}/clusters/{cluster_name}@ca-sha256:{digest}"


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
