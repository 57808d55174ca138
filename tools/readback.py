"""What each provider reads back after a create, where it differs from what the program sent.

The second `pulumi up` of an unchanged stack diffs the state the provider recorded after the
first (its Read, or a dynamic provider's create result) against the program's inputs. Where a
provider reads a field back differently (it drops it, normalises it, fills a server-side
default, or the object changed under it, as the cluster's removed default pool does), that
diff is not empty, and a ForceNew field turns it into a replacement on every later `up`. This
module is the one place that knows those differences, per resource type of the plan, each
with its provider source; `state_after_create` applies them, and tests/test_steady_state.py
replays the result through tools/plan_report.py (the logic of `make diff`) for every stack and
mode. A type of the plan without an entry here fails that test: a new resource type comes
with its read-back rules.

Sources (read at these commits; line numbers refer to them):
- TF: hashicorp/terraform-provider-google-beta @93c65b2d60 (2026-08-21), the provider pulumi-gcp
  bridges (pulumi/pulumi-gcp provider/go.mod: `terraform-provider-google-beta => ../upstream`;
  the GA provider's lines differ). The bridge stores the provider's Read after Create as the
  state, and diffs with the TF schema: a field the program sets differs when the read value
  differs (unless a DiffSuppressFunc says they are equal, or a StateFunc stored both in one
  form); an Optional+Computed field the program leaves unset never differs, whatever the API
  filled in.
- K8S: pulumi/pulumi-kubernetes @94977969d6, provider/pkg/provider/provider.go.
- Dynamic: pulumi 3.272.0 pulumi/dynamic/__main__.py (`Diff`: the provider's own diff of the
  last outputs against the new inputs; outputs are what `create` returned).

A rule with `compared=False` names the provider code that keeps the field out of the diff
(tests/test_steady_state.py holds every such rule to a file and line).

Not modelled, because it depends on live status rather than on what was read back: the
staging Job's `pulumi.com/replaceUnready` annotation (components/storage/model_staging.py).
pulumi-kubernetes' Diff replaces a Job that carries it whenever the live Job is not ready
(K8S provider.go:1622-1642, checkjob's Ready). After a first `up` that finished staging the Job
is Complete and nothing happens; a second `up` while staging still runs (after an earlier
failure) replaces the Job and restarts the download.
"""

from __future__ import annotations

import copy
import json
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


def _empty_map_dropped(path: str) -> Rule:
    """A map the program sends empty: the API server stores none (core/v1 Secret.data is
    `map[string][]byte` with `json:"data,omitempty"`), and a Secret is not round-tripped through
    the typed scheme (K8S provider/pkg/clients/unstructured.go:70-90 Normalize sends it to
    normalizeSecret, whose normalizeSecretData returns an empty map unchanged, :117-131,
    :159-163), so the live object, pruned to the inputs' shape (util.go:234-264), has no
    `data` and the merge patch is `{"data":{}}` (provider.go:2851-2864), an ADD (:3308):
    DIFF_SOME (:1604-1606) on every `up` (REAL-PROVIDER-REVIEW-4 finding 3)."""
    return Rule(path, DROPPED, _empty_map_dropped.__doc__ or "",
                read=lambda _sent: ABSENT, applies=lambda inputs: inputs.get(path) == {})


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
             "TF resource_container_cluster.go:3515-3530 deletes default-pool after creating the "
             "cluster; Read sets node_config from cluster.NodeConfig (:3887), which the API fills "
             "'with the node configuration of the first node pool' (container.v1 Cluster.nodeConfig): "
             "none then, so flattenNodeConfig returns nothing (node_config.go:3032-3036); the block is "
             "Optional+Computed+ForceNew (node_config.go:279-285)",
             read=lambda _sent: ABSENT,
             applies=lambda inputs: bool(inputs.get("removeDefaultNodePool"))),
        _server_default("nodePool",
                        "TF resource_container_cluster.go:1850-1854 (Optional+Computed+ForceNew), "
                        "read from cluster.NodePools (:3900): the system and GPU pools once they "
                        "exist"),
        _server_default("clusterIpv4Cidr",
                        "TF resource_container_cluster.go:1066-1070 (Optional+Computed+ForceNew), "
                        "read :3761"),
        _server_default("nodeVersion",
                        "TF resource_container_cluster.go:1899-1902 (Optional+Computed), "
                        "read :3758"),
        _server_default("nodeLocations",
                        "TF resource_container_cluster.go:336-339 (Optional+Computed), read :3727"),
        Rule("network", NORMALISED,
             "TF resource_container_cluster.go:1814-1819: DiffSuppressFunc "
             "CompareSelfLinkOrResourceName (a self link and a relative name are equal)",
             compared=False),
        Rule("subnetwork", NORMALISED,
             "TF resource_container_cluster.go:2028-2033: DiffSuppressFunc "
             "CompareSelfLinkOrResourceName",
             compared=False),
        # The control plane's endpoints (components/cluster/gke_cluster.py):
        # allowExternalTraffic and ipEndpointsConfig.enabled read back as sent
        # (flattenDnsEndpointConfig, flattenIpEndpointsConfig, TF
        # resource_container_cluster.go:8047-8070).
        _server_default("controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint",
                        "TF resource_container_cluster.go:2270-2275 (Optional+Computed), read "
                        ":8054 from DNSEndpointConfig.endpoint, 'Output only ... Always present' "
                        "(container.v1 discovery document)"),
        *(Rule(f"controlPlaneEndpointsConfig.dnsEndpointConfig.{flag}", SERVER_DEFAULT,
               "TF resource_container_cluster.go:2281-2290 (Optional, not Computed): the "
               "provider sends false when unset (expandControlPlaneEndpointsConfig :7102-7110, "
               "ForceSendFields) and flattenDnsEndpointConfig reads back false (:8055-8056); the "
               "SDK compares an unset bool as its zero value, false",
               compared=False, applies=_unset(f"controlPlaneEndpointsConfig.dnsEndpointConfig.{flag}"))
          for flag in ("enableK8sTokensViaDns", "enableK8sCertsViaDns")),
        Rule("privateClusterConfig.enablePrivateEndpoint", SERVER_DEFAULT,
             "with the IP endpoints disabled the provider does not send it (expand returns at "
             "TF resource_container_cluster.go:7119-7124) but reads back "
             "!IPEndpointsConfig.enablePublicEndpoint, whatever the API dictates "
             "(flattenPrivateClusterConfig :8081); the DiffSuppressFunc "
             "containerClusterPrivateClusterConfigSuppress suppresses that diff through "
             "containerClusterApiDictatedPrivateEndpointField (:9073-9076, :9108-9134, since "
             "8e44798f52, 2026-08-19)",
             read=lambda _sent: True, compared=False,
             applies=lambda inputs: _get(inputs, "controlPlaneEndpointsConfig.ipEndpointsConfig"
                                                 ".enabled") is False),
        # With the IP endpoints disabled, masterAuthorizedNetworksConfig is neither sent nor
        # read back (the API's config is disabled: flattenMasterAuthorizedNetworksConfig
        # returns nothing, :8558-8561). With controlPlaneCidrs: cidrBlocks is a TypeSet, read
        # back as sent whatever the order (:67-75), and the two flags are server defaults.
        *(_server_default(f"masterAuthorizedNetworksConfig.{flag}",
                          "TF resource_container_cluster.go:76-87 (Optional+Computed), read "
                          ":8571-8572")
          for flag in ("gcpPublicCidrsAccessEnabled", "privateEndpointEnforcementEnabled")),
        # initialNodeCount reads back what was sent (:3749, Cluster.initialNodeCount): Cluster
        # Toolkit sends 1 with remove_default_node_pool and does not ignore it
        # (modules/scheduler/gke-cluster/main.tf:130-131, 367-372 @1047080375).
        # minMasterVersion is not read back at all (Read sets master_version, :3752; the
        # Optional-only min_master_version, :1799-1801, keeps what was sent, and is sent as
        # InitialClusterVersion, :3203): the alias stays "1.34".
    )),
    "gcp:container/nodePool:NodePool": ReadBack(_TF, (
        Rule("nodeConfig.resourceLabels", NORMALISED,
             "GKE adds goog-gke-* labels; TF node_config.go:430-434: DiffSuppressFunc "
             "containerNodePoolResourceLabelsDiffSuppress (:3440) ignores them",
             compared=False),
        Rule("nodeConfig.taints", NORMALISED,
             "GKE's own taints (nvidia.com/gpu) are read into effective_taints; taint keeps only "
             "the configured keys (TF node_config.go:3078-3079, flattenTaints :3292-3312 with the "
             "old taints)",
             compared=False),
        Rule("nodeConfig.oauthScopes", NORMALISED,
             "a TypeSet hashed by canonical scope, with a StateFunc that canonicalises each "
             "(TF node_config.go:579-592, StringScopeHashcode)",
             compared=False),
        _server_default("nodeConfig.metadata",
                        "GKE sets disable-legacy-endpoints; TF node_config.go:562-566 "
                        "(Optional+Computed+ForceNew)"),
        _server_default("nodeConfig.diskType",
                        "TF node_config.go:299-302 (Optional+Computed): GKE's default disk"),
        _server_default("version",
                        "TF resource_container_node_pool.go:561-565 (Optional+Computed)"),
        # initialNodeCount is ignored by the program (the autoscaler owns the count).
    )),
    "gcp:compute/network:Network": ReadBack(_TF, (
        _server_default("routingMode",
                        "TF resource_compute_network.go:265-268 (Optional+Computed)"),
    )),
    "gcp:compute/subnetwork:Subnetwork": ReadBack(_TF, (
        _server_default("stackType",
                        "TF resource_compute_subnetwork.go:837-840 (Optional+Computed)"),
    )),
    "gcp:compute/firewall:Firewall": ReadBack(_TF, (
        Rule("sourceRanges", NORMALISED,
             "a TypeSet: read back in the API's order, compared as a set "
             "(TF resource_compute_firewall.go:372-375, DiffSuppressFunc diffSuppressSourceRanges :122)",
             compared=False),
    )),
    "gcp:compute/router:Router": ReadBack(_TF),
    # primary_network.py sends every port setting (dynamic allocation, min and max ports per VM,
    # endpoint-independent mapping off), and each reads back as sent (TF
    # resource_compute_router_nat.go:2467-2500; endpoint-independent mapping is sent even when
    # false, GetOkExists :839-843). The rules below apply only to a setting the program stops
    # sending: then the API's default is a server default the diff never compares.
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
    # The working directory's files (components/storage/working_dir.py): the program sends
    # bucket, name and source only, and the Read sets none of them (TF
    # resource_storage_bucket_object.go:549-640 sets the computed hashes, content settings and
    # links), so they stay as sent.
    "gcp:storage/bucketObject:BucketObject": ReadBack(_TF),
    "gcp:storage/bucketIAMMember:BucketIAMMember": ReadBack(_TF, (
        Rule("member", NORMALISED,
             "TF tpgiamresource/resource_iam_member.go:69-74: DiffSuppressFunc "
             "iamMemberCaseDiffSuppress (:35)",
             compared=False),
    )),
    "gcp:projects/iAMMember:IAMMember": ReadBack(_TF, (
        Rule("member", NORMALISED,
             "TF tpgiamresource/resource_iam_member.go:69-74: DiffSuppressFunc "
             "iamMemberCaseDiffSuppress (:35)",
             compared=False),
    )),
    "gcp:serviceaccount/account:Account": ReadBack(_TF),
    "gcp:artifactregistry/repository:Repository": ReadBack(_TF),
    "gcp:logging/metric:Metric": ReadBack(_TF),
    "gcp:monitoring/alertPolicy:AlertPolicy": ReadBack(_TF, (
        Rule("conditions", SERVER_DEFAULT,
             "each condition's `name` is set by the API (TF resource_monitoring_alert_policy.go:1096-1098, "
             "Computed only); the program sends none",
             compared=False),
    )),
    "gcp:monitoring/dashboard:Dashboard": ReadBack(_TF, (
        Rule("dashboardJson", DROPPED,
             "the Monitoring API returns the dashboard as proto3 JSON, without fields at their "
             "default (protobuf.dev/programming-guides/json; 'omitting zero-valued mosaic tile "
             "positions', GoogleCloudPlatform/magic-modules PR #18515), and adds name and etag; "
             "TF resource_monitoring_dashboard.go:62-74 monitoringDashboardDiffSuppress removes "
             "from the read only the keys the config lacks (removeComputedKeys :37-60), then "
             "compares with reflect.DeepEqual: a sent default that comes back missing is a diff",
             read=lambda sent: _dashboard_json_as_read(sent)),
    )),
    "pulumi:providers:kubernetes": ReadBack(
        "a provider's stored inputs against its new ones (K8S provider.go:454 DiffConfig); the "
        "kubeconfig is built from the cluster's DNS endpoint (or, with controlPlaneCidrs, its IP "
        "endpoint and CA), which do not change; clusterIdentifier is the Stash's output "
        "(components/cluster/kubeconfig.py provider_identity)"),
    # The engine's builtin Stash: create returns {input, output: input}, an update keeps the old
    # output (pulumi/pulumi pkg/resource/deploy/builtins.go:225-262 @1b5949891b); its diff
    # compares `input` only (:184-195), which the program ignores.
    "pulumi:index:Stash": ReadBack(
        "the builtin provider's stored `input` against the new one (pulumi builtins.go:184-195)"),
    "kubernetes:helm.sh/v3:Release": ReadBack(
        "the release's stored `__inputs` against the new inputs (K8S helm_release.go:795-855)"),
    **{
        kind: ReadBack(_K8S)
        for kind in (
            "kubernetes:apps/v1:DaemonSet", "kubernetes:batch/v1:CronJob",
            "kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Namespace",
            "kubernetes:rbac.authorization.k8s.io/v1:Role",
            "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
            "kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim",
            "kubernetes:core/v1:ResourceQuota", "kubernetes:core/v1:ServiceAccount",
            "kubernetes:networking.k8s.io/v1:NetworkPolicy",
            "kubernetes:policy/v1:PodDisruptionBudget",
            "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate",
            # Custom resources: not normalised (no typed scheme), so a field the server rewrote
            # would differ; CRD defaults land outside the sent fields and are pruned.
            "kubernetes:ray.io/v1:RayCluster", "kubernetes:monitoring.googleapis.com/v1:PodMonitoring",
            "kubernetes:networking.gke.io/v1:GKENetworkParamSet", "kubernetes:networking.gke.io/v1:Network",
            "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain",
        )
    },
    "kubernetes:batch/v1:Job": ReadBack(
        _K8S + "; the staging Job's pulumi.com/replaceUnready makes Diff replace it while the "
        "live Job is not ready (K8S provider.go:1622-1642): not a read-back, see the module "
        "docstring"),
    "kubernetes:core/v1:Secret": ReadBack(
        _K8S + "; the program sends `data` (standard base64), which the API server stores and "
        "returns as sent; normalizeSecretData decodes and re-encodes each value on both sides "
        "(K8S provider/pkg/clients/unstructured.go:157-188), which leaves standard base64 as it "
        "is. stringData would not be returned at all: "
        "normalizeSecretStringData (:134-154) folds it into data, but only for inputs without "
        "unknowns (normalizeInputs, provider.go:2983-2990)", (_empty_map_dropped("data"),)),
    "pulumi-python:dynamic/verl-gke:BucketIdentity": ReadBack(_DYNAMIC + "; create returns its inputs"),
    "pulumi-python:dynamic/verl-gke:DeletionProtection": ReadBack(_DYNAMIC + "; create returns its inputs"),
    # What create returns besides the inputs, as far as its diff reads it: a run being followed
    # (a FAILED or STOPPED status would be resubmitted, components/run/grpo_job.py diff).
    "pulumi-python:dynamic/verl-gke:GrpoRun": ReadBack(
        _DYNAMIC, created_outputs={"status": "RUNNING"}),
    "pulumi-python:dynamic/verl-gke:ClusterCheckRun": ReadBack(
        _DYNAMIC + "; create adds its measurements, which its diff does not read"),
}


# Map fields of a Dashboard (monitoring.v1 Dashboard.labels): proto3 JSON prints every entry of
# a non-empty map with its value, a default one included; only the map itself, when empty, is
# left out.
_DASHBOARD_MAPS = frozenset({"labels"})


def _proto3_read(value: Any) -> Any:
    """A JSON body as a proto3 API returns it: fields at their default (0, false, "", [], an
    empty map) left out, recursively; entries of map fields kept."""
    if isinstance(value, dict):
        kept = {}
        for key, inner in value.items():
            if key in _DASHBOARD_MAPS:
                if inner:
                    kept[key] = inner
                continue
            inner = _proto3_read(inner)
            default = inner is False or inner == "" or inner == [] or (
                type(inner) in (int, float) and inner == 0)
            if not default:
                kept[key] = inner
        return kept
    if isinstance(value, list):
        return [_proto3_read(inner) for inner in value]
    return value


def _remove_computed_keys(old: Any, new: Any) -> Any:
    """TF resource_monitoring_dashboard.go:37-60 removeComputedKeys: drop from `old` (the read)
    every key that `new` (the config) lacks or holds null, recursing into objects and into
    objects in lists."""
    if not isinstance(old, dict):
        return old
    result = {}
    for key, inner in old.items():
        if not isinstance(new, dict) or new.get(key) is None:
            continue
        if isinstance(inner, dict):
            inner = _remove_computed_keys(inner, new[key])
        elif isinstance(inner, list) and isinstance(new[key], list):
            inner = [_remove_computed_keys(o, n) if isinstance(o, dict) else o
                     for o, n in zip(inner, new[key])] + inner[len(new[key]):]
        result[key] = inner
    return result


def _dashboard_json_as_read(sent: str) -> str:
    """dashboardJson as the provider's next diff sees it: `sent` itself when the diff
    suppression finds the read equal to it, else the read (normalised JSON, as the StateFunc,
    resource_monitoring_dashboard.go:104-106, stores it)."""
    config = json.loads(sent)
    read = {**_proto3_read(config), "name": "projects/p/dashboards/d", "etag": "e"}
    if _remove_computed_keys(copy.deepcopy(read), config) == config:
        return sent
    return json.dumps(read, sort_keys=True, separators=(",", ":"))


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
