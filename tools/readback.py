"""What each provider reads back after a create, where it differs from what the program sent.

The second `pulumi up` of an unchanged stack diffs the state the provider recorded after the
first (its Read, or a dynamic provider's create result) against the program's inputs. Where a
provider reads a field back differently (it drops it, normalises it, fills a server-side
default, or the object changed under it, as the cluster's removed default pool does), that
diff is not empty, and a ForceNew field turns it into a replacement on every later `up`. This
module is the one place that knows those differences, per resource type of the plan, each
with its provider source; `state_after_create` applies them, and tests/test_steady_state.py
replays the result through tools/plan_diff.py (the logic of `make diff`) for every stack and
mode. A type of the plan without an entry here fails that test: a new resource type comes
with its read-back rules.

Sources (read at these commits; line numbers refer to them):
- TF: hashicorp/terraform-provider-google @e03b7622a2 (2026-08-21), which pulumi-gcp bridges.
  The bridge stores the provider's Read after Create as the state, and diffs with the TF schema:
  a field the program sets differs when the read value differs (unless a DiffSuppressFunc says
  they are equal, or a StateFunc stored both in one form); an Optional+Computed field the
  program leaves unset never differs, whatever the API filled in.
- K8S: pulumi/pulumi-kubernetes @94977969d6, provider/pkg/provider/provider.go.
- Dynamic: pulumi 3.272.0 pulumi/dynamic/__main__.py (`Diff`: the provider's own diff of the
  last outputs against the new inputs; outputs are what `create` returned).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

DROPPED = "dropped"  # the provider's read does not return what was sent
NORMALISED = "normalised"  # read back in another form
SERVER_DEFAULT = "server default"  # filled by the API where the program sends nothing
DEFAULT_POOL = "removed default pool"  # the cluster's config of a pool deleted after creation

ABSENT = object()  # `Rule.read` result: the state holds no value at the path


def _always(_inputs: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Rule:
    """One field the provider reads back differently from what the program sent."""

    path: str  # the plan's input path, camelCase, dot-separated (`nodeConfig`, `location`)
    kind: str  # DROPPED, NORMALISED, SERVER_DEFAULT or DEFAULT_POOL
    source: str  # where the provider does it
    # What the state holds at `path`, given what the program sent there (ABSENT: nothing).
    # None: the rule changes nothing the diff compares (see `compared`).
    read: Callable[[Any], Any] | None = None
    # False where the provider's diff does not compare the two: a DiffSuppressFunc or StateFunc
    # makes them equal, or the field is Optional+Computed and the program leaves it unset.
    compared: bool = True
    # Whether the rule holds for a resource with these inputs (the plan's, camelCase).
    applies: Callable[[Mapping[str, Any]], bool] = _always


@dataclass(frozen=True)
class ReadBack:
    """How a provider's next diff sees a resource it has just created."""

    basis: str  # what the diff compares, and its source
    rules: tuple[Rule, ...] = ()
    # Outputs a dynamic provider's `create` adds to its inputs (the state its diff gets).
    created_outputs: Mapping[str, Any] = field(default_factory=dict)


def _unset(path: str) -> Callable[[Mapping[str, Any]], bool]:
    def unset(inputs: Mapping[str, Any]) -> bool:
        return _get(inputs, path) is ABSENT
    return unset


def _server_default(path: str, source: str) -> Rule:
    """A field the program leaves unset and the API fills: read back, never compared."""
    return Rule(path, SERVER_DEFAULT, source, compared=False, applies=_unset(path))


_TF = ("TF bridge: the state is the provider's Read after Create; see the module docstring for "
       "what the diff compares")
_K8S = ("pulumi-kubernetes Diff compares the live object, pruned to the shape of the last inputs, "
        "with the new inputs, both normalised through the typed scheme for built-in kinds "
        "(K8S provider.go:1483-1540, pruneLiveState :2966, normalizeInputs :2983): what the "
        "server adds outside the sent fields is pruned away")
_DYNAMIC = "the provider's own diff(olds = create's outputs, news = inputs) (Dynamic __main__.py:114-135)"

READBACK: dict[str, ReadBack] = {
    "gcp:container/cluster:Cluster": ReadBack(_TF, (
        Rule("nodeConfig", DEFAULT_POOL,
             "TF resource_container_cluster.go:3298-3310 deletes default-pool after creating the "
             "cluster; Read sets node_config from cluster.NodeConfig (:3670), which the API fills "
             "'with the node configuration of the first node pool' (container.v1 Cluster.nodeConfig): "
             "none then, so flattenNodeConfig returns nothing (node_config.go:2919); the block is "
             "Optional+Computed+ForceNew (node_config.go:279-284)",
             read=lambda _sent: ABSENT,
             applies=lambda inputs: bool(inputs.get("removeDefaultNodePool"))),
        _server_default("nodePool",
                        "TF resource_container_cluster.go:1714-1718 (Optional+Computed+ForceNew), "
                        "read from cluster.NodePools (:3683): the system and GPU pools once they "
                        "exist"),
        _server_default("clusterIpv4Cidr",
                        "TF resource_container_cluster.go:1023-1027 (Optional+Computed+ForceNew), "
                        "read :3544"),
        _server_default("nodeVersion",
                        "TF resource_container_cluster.go:1763-1766 (Optional+Computed), "
                        "read :3541"),
        _server_default("nodeLocations",
                        "TF resource_container_cluster.go:334 (Optional+Computed), read :3510"),
        Rule("network", NORMALISED,
             "TF resource_container_cluster.go:1678-1683: DiffSuppressFunc "
             "CompareSelfLinkOrResourceName (a self link and a relative name are equal)",
             compared=False),
        Rule("subnetwork", NORMALISED,
             "TF resource_container_cluster.go:1876-1882, CompareSelfLinkOrResourceName",
             compared=False),
        # The control plane's endpoints (components/cluster/gke_cluster.py). Cited from
        # hashicorp/terraform-provider-google-beta @93c65b2d60 (2026-08-21, the 8.0.0 line that
        # pulumi-gcp 10 bridges), google-beta/services/container/resource_container_cluster.go
        # ("beta" below). allowExternalTraffic and ipEndpointsConfig.enabled read back as sent
        # (flattenDnsEndpointConfig, flattenIpEndpointsConfig, beta :8047-8070).
        _server_default("controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint",
                        "beta :2270-2275 (Optional+Computed), read :8054 from DNSEndpointConfig."
                        "endpoint, 'Output only ... Always present' (container.v1 discovery "
                        "document)"),
        *(Rule(f"controlPlaneEndpointsConfig.dnsEndpointConfig.{flag}", SERVER_DEFAULT,
               "beta :2281-2290 (Optional, not Computed): the provider sends false when unset "
               "(expandControlPlaneEndpointsConfig :7102-7110, ForceSendFields) and reads back "
               "false (:8055-8056); the SDK compares an unset bool as its zero value, false",
               compared=False, applies=_unset(f"controlPlaneEndpointsConfig.dnsEndpointConfig.{flag}"))
          for flag in ("enableK8sTokensViaDns", "enableK8sCertsViaDns")),
        Rule("privateClusterConfig.enablePrivateEndpoint", SERVER_DEFAULT,
             "with the IP endpoints disabled the provider does not send it (expand returns at "
             "beta :7119-7124) but reads back !IPEndpointsConfig.enablePublicEndpoint, whatever "
             "the API dictates (flattenPrivateClusterConfig :8081); "
             "containerClusterApiDictatedPrivateEndpointField suppresses that diff (:9073-9076, "
             ":9108-9134, since 8e44798f52, 2026-08-19)",
             read=lambda _sent: True, compared=False,
             applies=lambda inputs: _get(inputs, "controlPlaneEndpointsConfig.ipEndpointsConfig"
                                                 ".enabled") is False),
        # With the IP endpoints disabled, masterAuthorizedNetworksConfig is neither sent nor
        # read back (the API's config is disabled: flattenMasterAuthorizedNetworksConfig
        # returns nothing, :8558-8561). With controlPlaneCidrs: cidrBlocks is a TypeSet, read
        # back as sent whatever the order (:67-75), and the two flags are server defaults.
        *(_server_default(f"masterAuthorizedNetworksConfig.{flag}",
                          "beta :76-87 (Optional+Computed), read :8571-8572")
          for flag in ("gcpPublicCidrsAccessEnabled", "privateEndpointEnforcementEnabled")),
        # initialNodeCount reads back what was sent (:3532, Cluster.initialNodeCount): Cluster
        # Toolkit sends 1 with remove_default_node_pool and does not ignore it
        # (modules/scheduler/gke-cluster/main.tf:130-131, 367-372 @1047080375).
        # minMasterVersion is not read back at all (Read sets master_version, :3535; the
        # Optional-only min_master_version, :1664, keeps what was sent): the alias stays "1.34".
    )),
    "gcp:container/nodePool:NodePool": ReadBack(_TF, (
        Rule("nodeConfig.resourceLabels", NORMALISED,
             "GKE adds goog-gke-* labels; TF node_config.go:3277-3281 "
             "containerNodePoolResourceLabelsDiffSuppress ignores them",
             compared=False),
        Rule("nodeConfig.taints", NORMALISED,
             "GKE's own taints (nvidia.com/gpu) are read into effective_taints; taint keeps the "
             "configured ones (TF node_config.go:2964-2965, flattenTaints with the old taints)",
             compared=False),
        Rule("nodeConfig.oauthScopes", NORMALISED,
             "a set hashed by canonical scope (TF node_config.go:2986, StringScopeHashcode)",
             compared=False),
        _server_default("nodeConfig.metadata",
                        "GKE sets disable-legacy-endpoints; TF node_config.go:543-547 "
                        "(Optional+Computed+ForceNew)"),
        _server_default("nodeConfig.diskType",
                        "TF node_config.go:299-302 (Optional+Computed): GKE's default disk"),
        _server_default("version",
                        "TF resource_container_node_pool.go:544-548 (Optional+Computed)"),
        # initialNodeCount is ignored by the program (the autoscaler owns the count).
    )),
    "gcp:compute/network:Network": ReadBack(_TF, (
        _server_default("routingMode",
                        "TF resource_compute_network.go:265-268 (Optional+Computed)"),
    )),
    "gcp:compute/subnetwork:Subnetwork": ReadBack(_TF, (
        _server_default("stackType",
                        "TF resource_compute_subnetwork.go:694-697 (Optional+Computed)"),
    )),
    "gcp:compute/firewall:Firewall": ReadBack(_TF, (
        Rule("sourceRanges", NORMALISED,
             "a TypeSet: read back in the API's order, compared as a set "
             "(TF resource_compute_firewall.go:372-375, diffSuppressSourceRanges)",
             compared=False),
    )),
    "gcp:compute/router:Router": ReadBack(_TF),
    # The NAT as primary_network.py sends it today: no port settings, so the API's (64 static
    # ports per VM, no dynamic allocation) are server defaults the diff never compares. Sent
    # port settings read back as sent.
    "gcp:compute/routerNat:RouterNat": ReadBack(_TF, (
        _server_default("minPortsPerVm",
                        "TF resource_compute_router_nat.go:434-438 (Optional+Computed; 'Defaults to "
                        "64 for static port allocation and 32 dynamic port allocation if not set')"),
        _server_default("enableDynamicPortAllocation",
                        "TF resource_compute_router_nat.go:355-358 (Optional+Computed)"),
        _server_default("enableEndpointIndependentMapping",
                        "TF resource_compute_router_nat.go:367-370 (Optional+Computed)"),
    )),
    "gcp:compute/resourcePolicy:ResourcePolicy": ReadBack(_TF),
    "gcp:storage/bucket:Bucket": ReadBack(_TF, (
        Rule("location", NORMALISED,
             "TF resource_storage_bucket.go:193-199: StateFunc upper-cases it, on both sides",
             compared=False),
        _server_default("softDeletePolicy",
                        "TF resource_storage_bucket.go:602-606 (Optional+Computed): 7 days by "
                        "default"),
    )),
    "gcp:storage/bucketIAMMember:BucketIAMMember": ReadBack(_TF, (
        Rule("member", NORMALISED,
             "TF tpgiamresource/resource_iam_member.go:69-74: iamMemberCaseDiffSuppress",
             compared=False),
    )),
    "gcp:projects/iAMMember:IAMMember": ReadBack(_TF, (
        Rule("member", NORMALISED,
             "TF tpgiamresource/resource_iam_member.go:69-74: iamMemberCaseDiffSuppress",
             compared=False),
    )),
    "gcp:serviceaccount/account:Account": ReadBack(_TF),
    "gcp:artifactregistry/repository:Repository": ReadBack(_TF),
    "gcp:logging/metric:Metric": ReadBack(_TF),
    "gcp:monitoring/alertPolicy:AlertPolicy": ReadBack(_TF, (
        Rule("conditions", SERVER_DEFAULT,
             "each condition's `name` is set by the API (TF resource_monitoring_alert_policy.go:1096-1098, "
             "Computed); the program sends none",
             compared=False),
    )),
    "gcp:monitoring/dashboard:Dashboard": ReadBack(_TF, (
        Rule("dashboardJson", NORMALISED,
             "TF resource_monitoring_dashboard.go:62-75 monitoringDashboardDiffSuppress: keys the API "
             "adds are removed before comparing (removeComputedKeys, :37); the StateFunc "
             "normalises the JSON (:104)",
             compared=False),
    )),
    "pulumi:providers:kubernetes": ReadBack(
        "a provider's stored inputs against its new ones (K8S provider.go:454 DiffConfig); the "
        "kubeconfig is built from the cluster's DNS endpoint (or, with controlPlaneCidrs, its IP "
        "endpoint and CA), which do not change; so is clusterIdentifier (the cluster's name and CA)"),
    "kubernetes:helm.sh/v3:Release": ReadBack(
        "the release's stored `__inputs` against the new inputs (K8S helm_release.go:795-855)"),
    **{
        kind: ReadBack(_K8S)
        for kind in (
            "kubernetes:batch/v1:Job", "kubernetes:batch/v1:CronJob",
            "kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Namespace",
            "kubernetes:rbac.authorization.k8s.io/v1:Role",
            "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
            "kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim",
            "kubernetes:core/v1:ResourceQuota", "kubernetes:core/v1:ServiceAccount",
            "kubernetes:networking.k8s.io/v1:NetworkPolicy",
            "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate",
            # Custom resources: not normalised (no typed scheme), so a field the server rewrote
            # would differ; CRD defaults land outside the sent fields and are pruned.
            "kubernetes:ray.io/v1:RayCluster", "kubernetes:monitoring.googleapis.com/v1:PodMonitoring",
            "kubernetes:networking.gke.io/v1:GKENetworkParamSet", "kubernetes:networking.gke.io/v1:Network",
            "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain",
        )
    },
    "kubernetes:core/v1:Secret": ReadBack(
        _K8S + "; a Secret's stringData comes back base64-encoded in data, and normalizeSecret "
        "(K8S provider/pkg/clients/unstructured.go) encodes the inputs the same way"),
    "pulumi-python:dynamic/verl-gke:BucketIdentity": ReadBack(_DYNAMIC + "; create returns its inputs"),
    "pulumi-python:dynamic/verl-gke:DeletionProtection": ReadBack(_DYNAMIC + "; create returns its inputs"),
    # What create returns besides the inputs, as far as its diff reads it: a run being followed
    # (a FAILED or STOPPED status would be resubmitted, components/ray/grpo_job.py diff).
    "pulumi-python:dynamic/verl-gke:GrpoRun": ReadBack(
        _DYNAMIC, created_outputs={"status": "RUNNING"}),
    "pulumi-python:dynamic/verl-gke:ClusterCheckRun": ReadBack(
        _DYNAMIC + "; create adds its measurements, which its diff does not read"),
}


def rules_for(resource_type: str) -> ReadBack:
    """The type's read-back entry; KeyError names the type when there is none."""
    try:
        return READBACK[resource_type]
    except KeyError:
        raise KeyError(
            f"{resource_type} has no read-back entry in tools/readback.py: add what its provider "
            "reads back differently from what the program sends (or that nothing does), with "
            "the provider source"
        ) from None


def state_after_create(resource: Mapping[str, Any]) -> dict[str, Any]:
    """A plan resource (tools/plan.py plan_document) as its provider's next diff sees it right
    after the create: the inputs with every compared rule that applies done to them, plus a
    dynamic provider's created outputs."""
    entry = rules_for(resource["type"])
    inputs = copy.deepcopy(dict(resource.get("inputs") or {}))
    for rule in entry.rules:
        if rule.compared and rule.read is not None and rule.applies(resource.get("inputs") or {}):
            _set(inputs, rule.path, rule.read(_get(inputs, rule.path)))
    inputs.update(copy.deepcopy(dict(entry.created_outputs)))
    return {**resource, "inputs": inputs}


def _get(value: Mapping[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return ABSENT
        value = value[key]
    return value


def _set(value: dict[str, Any], path: str, new: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        value = value.setdefault(key, {})
    if new is ABSENT:
        value.pop(last, None)
    else:
        value[last] = new
