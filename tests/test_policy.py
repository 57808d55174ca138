"""The policy pack (policy/): each rule passes a real plan resource and fails a violating one.

Cases are built from the resources of the real offline plan (tests.conftest.rendered), changed
in the one field a rule is about, and run through tools/policy_check.py: the adapter that feeds
plan resources to the very validate functions `pulumi preview --policy-pack policy` loads.
"""

from __future__ import annotations

import copy
import json
import re
import runpy
import subprocess
import sys

import pytest

import pulumi_policy
from policy import rules
from policy.access import NODE_SERVICE_ACCOUNT_ROLES, is_iam_type
from policy.common import (
    BUCKET, CLUSTER, GRPO_RUN, K8S_PROVIDER, K8S_SECRET, K8S_SERVICE, NETWORK_POLICY, NODE_POOL,
    RAY_CLUSTER, SECRET,
)
from policy.resources import ALLOW_FORCE_DESTROY, REQUIRED_LABELS, label_input
from policy.supply_chain import HELM_RELEASE, MANIFEST_FILES, container_images
from tests.conftest import STACK_MODES, rendered
from tools import plan, policy_check

def resources(stack: str = "a4", mode: str = "standard") -> list[dict]:
    """The plan.json resources of a stack, as a fresh copy a test may change."""
    inputs, recording = rendered(stack, mode)
    return copy.deepcopy(plan.plan_document(stack, inputs, recording)["resources"])


def one(found: list[dict], type_: str, name: str | None = None) -> dict:
    [match] = [r for r in found if r["type"] == type_ and (name is None or r["name"] == name)]
    return match


def violations(policy_name: str, found: list[dict], config: dict | None = None) -> list[str]:
    """Messages `policy_name` reports for these resources, through the offline adapter."""
    [policy] = [p for p in rules.POLICIES if p.name == policy_name]
    return [v.message for v in policy_check.check_resources(found, config, [policy])]


# --- the pack itself ---------------------------------------------------------------------------


def test_the_cli_entry_point_serves_exactly_the_rules_make_policy_runs(monkeypatch):
    """policy/__main__.py hands PolicyPack the same policy objects tools/policy_check.py runs,
    all mandatory, and installs the secret view first: there is no second copy of a rule."""
    served = {}

    def fake_pack(**kwargs):
        served.update(kwargs)

    monkeypatch.setattr(pulumi_policy, "PolicyPack", fake_pack)
    runpy.run_path(str(plan.ROOT / "policy" / "__main__.py"), run_name="__main__")
    assert served["policies"] is rules.POLICIES is policy_check.POLICIES
    assert served["name"] == "verl-gke"
    assert len({p.name for p in rules.POLICIES}) == len(rules.POLICIES) == 11
    # Levels live in policy/config.json only, which the CLI gets as the pack's initial config.
    assert all(p.enforcement_level is None for p in rules.POLICIES)
    mandatory = pulumi_policy.EnforcementLevel.MANDATORY
    assert served["initial_config"] == rules.initial_config()
    assert {name: c["enforcementLevel"] for name, c in served["initial_config"].items()} == {
        p.name: mandatory for p in rules.POLICIES
    }
    assert served["initial_config"]["bucket-hardened"][ALLOW_FORCE_DESTROY] is False


def test_the_pack_stands_alone():
    """An organisation copies policy/ into its own repository: the pack imports nothing of
    components/ or tools/ (checked in a fresh interpreter, as the CLI runs it), and the labels
    it requires are the ones the program sets."""
    from components.schema import names

    probe = ("import runpy, sys, pulumi_policy\n"
             "pulumi_policy.PolicyPack = lambda **kwargs: None\n"
             "runpy.run_path('policy/__main__.py', run_name='__main__')\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'components', 'tools'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=plan.ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert REQUIRED_LABELS == (names.STACK_LABEL, names.TARGET_LABEL, names.CLUSTER_LABEL)


def test_the_private_function_the_pack_patches_keeps_its_shape():
    """show_secrets_as_the_plan_does replaces pulumi_policy.deserialize._deserialize_property
    (private; pulumi/pulumi-policy#241 asks for a public way). If a pulumi-policy release renames
    it, changes its parameters, the secret marker, or stops calling it through the module global
    from deserialize_properties (what Analyze and AnalyzeStack call with proxy_secrets=False),
    the patch would silently stop hiding secrets: this fails first."""
    import inspect

    from pulumi_policy import deserialize

    original = deserialize._deserialize_property
    original = getattr(original, "__wrapped__", original)
    parameters = inspect.signature(original).parameters
    assert list(parameters) == ["prop", "proxy_secrets"]
    assert parameters["proxy_secrets"].default is False
    assert deserialize.SPECIAL_SIG_KEY == "4dabf18193072939515e22adb298388d"
    assert deserialize.SPECIAL_SECRET_SIG == "1b47061264138c4ac30d75fd1eb44270"
    assert "_deserialize_property" in deserialize.deserialize_properties.__code__.co_names
    analyzer = inspect.getsource(pulumi_policy.policy._PolicyAnalyzerServicer)
    assert "deserialize_properties(json_format.MessageToDict(request.properties))" in analyzer


def _pack_config(tmp_path, document) -> list[str]:
    path = tmp_path / "org.json"
    path.write_text(json.dumps(document))
    return ["--policy-pack-config", str(path)]


def test_each_rule_s_level_is_set_in_policy_config(tmp_path, capsys):
    """An organisation sets a rule advisory or disabled in the CLI's --policy-pack-config
    format; `make policy` then reports it as advisory (exit 0) or does not run it."""
    found = resources()
    bucket = one(found, BUCKET)
    bucket["inputs"]["publicAccessPrevention"] = "inherited"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"stack": "a4", "resources": [bucket], "outputs": {}}))
    assert policy_check.main(["--plan", str(plan_file)]) == 1
    capsys.readouterr()
    advisory = _pack_config(tmp_path, {"bucket-hardened": "advisory"})
    assert policy_check.main(["--plan", str(plan_file), *advisory]) == 0
    assert "[advisory] bucket-hardened" in capsys.readouterr().out
    disabled = _pack_config(tmp_path, {"all": "advisory", "bucket-hardened": {"enforcementLevel": "disabled"}})
    assert policy_check.main(["--plan", str(plan_file), *disabled]) == 0
    assert "bucket-hardened" not in capsys.readouterr().out
    printed = _pack_config(tmp_path, {"all": "advisory"})
    assert policy_check.main(["--plan", str(plan_file), "--print-config", *printed]) == 0
    config = json.loads(capsys.readouterr().out)
    assert {c["enforcementLevel"] for c in config.values()} == {"advisory"}
    assert config["bucket-hardened"][ALLOW_FORCE_DESTROY] is False


@pytest.mark.parametrize("document, message", [
    ({"bucket-hardend": "advisory"}, "'bucket-hardend' is not a policy of this pack"),
    ({"gcp-labels": "warn"}, "gcp-labels.enforcementLevel = 'warn' is not a level this pack takes"),
])
def test_a_bad_policy_config_names_the_policy_and_the_fix(tmp_path, document, message):
    """A misspelled policy or level in the pack's config is an error, not a rule quietly left
    at its default."""
    with pytest.raises(Exception, match=re.escape(message)):
        policy_check.main(["--stack", "a4", "--print-config", *_pack_config(tmp_path, document)])


def test_secrets_reach_the_pack_as_the_plan_shows_them():
    """pulumi-policy would hand a validation a secret's plain value; with the pack's secret view
    the engine's secret marker arrives as "[secret]" (as in plan.json), plain values as they are."""
    from pulumi_policy import deserialize

    rules.show_secrets_as_the_plan_does()
    wire = {
        "stringData": {"hf_api_token": {deserialize.SPECIAL_SIG_KEY: deserialize.SPECIAL_SECRET_SIG, "value": "hf_x"}},
        "plain": ["a", {"b": 1}],
    }
    assert deserialize.deserialize_properties(wire) == {"stringData": {"hf_api_token": "[secret]"}, "plain": ["a", {"b": 1}]}
    assert SECRET == "[secret]"


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def test_every_stack_passes_every_rule(stack, mode):
    """`make policy` on each stack and mode: no violation, over every kind of resource it has."""
    found = resources(stack, mode)
    assert policy_check.check_resources(found, policy_check.policy_config(stack)) == []
    assert {BUCKET, CLUSTER, RAY_CLUSTER, K8S_SECRET} <= {r["type"] for r in found}


def test_make_policy_exits_1_on_a_violation_and_0_on_a_clean_plan(tmp_path, capsys):
    """The CLI behind `make policy` fails on a mandatory violation and names policy and resource."""
    found = resources()
    bucket = one(found, BUCKET)
    document = {"stack": "a4", "resources": [bucket], "outputs": {}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    assert policy_check.main(["--plan", str(path)]) == 0
    bucket["inputs"]["publicAccessPrevention"] = "inherited"
    path.write_text(json.dumps(document))
    assert policy_check.main(["--plan", str(path)]) == 1
    out = capsys.readouterr().out
    assert "[mandatory] bucket-hardened: urn:pulumi:a4::verl-gke::" in out and "1 mandatory violation" in out


# --- Ray head ----------------------------------------------------------------------------------


def _head_service(ray_cluster: dict, service_type: str) -> dict:
    name = ray_cluster["inputs"]["metadata"]["name"]
    return {
        "urn": "urn:pulumi:a4::verl-gke::kubernetes:core/v1:Service::exposed", "type": K8S_SERVICE,
        "name": "exposed", "options": {}, "parent": None,
        "inputs": {"metadata": {"name": "exposed", "namespace": "default"},
                   "spec": {"type": service_type, "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"}}},
    }


def _ingress_to(service: str) -> dict:
    return {
        "urn": "urn:pulumi:a4::verl-gke::kubernetes:networking.k8s.io/v1:Ingress::dash", "name": "dash",
        "type": "kubernetes:networking.k8s.io/v1:Ingress", "options": {}, "parent": None,
        "inputs": {"metadata": {"name": "dash", "namespace": "default"}, "spec": {"rules": [{"http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": service, "port": {"number": 8265}}}}]}}]}},
    }


def test_a_ray_head_behind_a_cluster_ip_passes():
    """The program's head Service is ClusterIP (KubeRay's serviceType) and nothing routes to it."""
    assert violations("ray-head-not-exposed", resources()) == []


@pytest.mark.parametrize("exposure", ["LoadBalancer service", "NodePort service", "serviceType", "ingress"])
def test_an_exposed_ray_head_is_a_violation(exposure):
    """A LoadBalancer or NodePort Service selecting the head, KubeRay asked for one, or an
    Ingress to the head Service: each is reported."""
    found = resources()
    ray = one(found, RAY_CLUSTER)
    name = ray["inputs"]["metadata"]["name"]
    if exposure.endswith("service"):
        found.append(_head_service(ray, exposure.split()[0]))
    elif exposure == "serviceType":
        ray["inputs"]["spec"]["headGroupSpec"]["serviceType"] = "LoadBalancer"
    else:
        found.append(_ingress_to(f"{name}-head-svc"))
    [message] = violations("ray-head-not-exposed", found)
    assert name in message or "exposed" in message


def test_every_ray_cluster_has_its_network_policy():
    """The head NetworkPolicy the program creates matches its RayCluster."""
    assert violations("ray-cluster-network-policy", resources("a4x")) == []


@pytest.mark.parametrize("change", ["removed", "other cluster", "other namespace"])
def test_a_ray_cluster_without_its_network_policy_is_a_violation(change):
    """No policy, one for another cluster, or one in another namespace leaves the head open."""
    found = resources()
    policy = one(found, NETWORK_POLICY)
    if change == "removed":
        found.remove(policy)
    elif change == "other cluster":
        policy["inputs"]["spec"]["podSelector"]["matchLabels"]["ray.io/cluster"] = "another"
    else:
        policy["inputs"]["metadata"]["namespace"] = "elsewhere"
    [message] = violations("ray-cluster-network-policy", found)
    assert "has no NetworkPolicy" in message


# --- IAM ---------------------------------------------------------------------------------------


def test_the_programs_grants_pass():
    """roles/storage.objectUser on the bucket for the Ray pods' principal, and the node service
    account's project roles GKE documents for it (components/cluster/node_identity.py)."""
    found = resources()
    grants = [r for r in found if is_iam_type(r["type"])]
    assert {r["inputs"]["role"] for r in grants if r["type"] == "gcp:projects/iAMMember:IAMMember"} == set(
        NODE_SERVICE_ACCOUNT_ROLES)
    assert violations("iam-bucket-scope-only", grants) == []


@pytest.mark.parametrize("member", ["user:someone@example.com", "group:ml@example.com"])
def test_a_node_role_for_a_person_is_a_violation(member):
    """The node roles pass only for a service account: to a person they are a project grant."""
    [grant] = [r for r in resources() if r["type"] == "gcp:projects/iAMMember:IAMMember"][:1]
    grant["inputs"]["member"] = member
    [message] = violations("iam-bucket-scope-only", [grant])
    assert "above bucket scope" in message


@pytest.mark.parametrize(
    ("type_", "role", "expected"),
    [
        ("gcp:projects/iAMMember:IAMMember", "roles/storage.objectUser", "above bucket scope"),
        ("gcp:serviceaccount/iAMBinding:IAMBinding", "roles/iam.workloadIdentityUser", "above bucket scope"),
        ("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/editor", "roles/editor is a basic role"),
        ("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/owner", "roles/owner is a basic role"),
    ],
)
def test_project_scope_or_basic_roles_are_violations(type_, role, expected):
    """A grant above the bucket, or owner / editor anywhere, is reported."""
    grant = one(resources(), "gcp:storage/bucketIAMMember:BucketIAMMember")
    grant["type"], grant["inputs"]["role"] = type_, role
    assert any(expected in m for m in violations("iam-bucket-scope-only", [grant]))


# --- Bucket ------------------------------------------------------------------------------------


def test_the_programs_bucket_passes():
    """Uniform access, public access prevention enforced, not force-destroyed."""
    assert violations("bucket-hardened", resources()) == []


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("uniformBucketLevelAccess", False, "uniformBucketLevelAccess must be true"),
        ("publicAccessPrevention", "inherited", "publicAccessPrevention must be 'enforced'"),
        ("forceDestroy", True, "forceDestroy deletes every object"),
    ],
)
def test_a_weakened_bucket_is_a_violation(field, value, expected):
    """Object ACLs, public access or a force-destroy the stack did not ask for: reported."""
    bucket = one(resources(), BUCKET)
    bucket["inputs"][field] = value
    [message] = violations("bucket-hardened", [bucket])
    assert expected in message


def test_force_destroy_passes_only_when_the_stack_configures_it(tmp_path, monkeypatch):
    """`verl-gke:deleteBucketOnDestroy true` in the stack file is what allows forceDestroy."""
    bucket = one(resources(), BUCKET)
    bucket["inputs"]["forceDestroy"] = True
    (tmp_path / "Pulumi.yaml").write_text((plan.ROOT / "Pulumi.yaml").read_text())
    stack_file = (plan.ROOT / "Pulumi.a4.yaml").read_text()
    (tmp_path / "Pulumi.a4.yaml").write_text(stack_file)
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    assert violations("bucket-hardened", [bucket], policy_check.policy_config("a4"))
    (tmp_path / "Pulumi.a4.yaml").write_text(stack_file + "  verl-gke:deleteBucketOnDestroy: true\n")
    assert violations("bucket-hardened", [bucket], policy_check.policy_config("a4")) == []


# --- Images ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image", ["verlai/verl:vllm011.dev7", "us-docker.pkg.dev/p/r/x@sha256:" + "a" * 64, "localhost:5000/x:1.0"]
)
def test_pinned_images_pass(image):
    """A tag other than latest, or a digest; a registry port is not mistaken for a tag."""
    ray = one(resources(), RAY_CLUSTER)
    ray["inputs"]["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = image
    assert violations("images-pinned", [ray]) == []


def test_every_image_of_the_program_is_pinned():
    """All Kubernetes objects of a4x (RayCluster, staging Job ...) pass, and the rule saw them."""
    found = resources("a4x")
    images = {i for r in found if r["type"].startswith("kubernetes:") for i in container_images(r["inputs"])}
    assert any("/verlai/verl:" in i for i in images) and len(images) >= 2, images
    assert violations("images-pinned", found) == []


@pytest.mark.parametrize(("image", "expected"), [("verlai/verl:latest", ":latest"), ("localhost:5000/verl", "no tag")])
def test_floating_or_untagged_images_are_violations(image, expected):
    """The RayCluster's worker image set to :latest or to no tag at all is reported."""
    ray = one(resources(), RAY_CLUSTER)
    worker = ray["inputs"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["containers"][0]["image"] = image
    [message] = violations("images-pinned", [ray])
    assert expected in message and image in message


# --- GPU capacity ------------------------------------------------------------------------------


def _gpu_pool(stack: str = "a4") -> dict:
    return one(resources(stack), NODE_POOL, "gpu-pool")


@pytest.mark.parametrize("capacity", ["reservation", "spot", "flexStart"])
def test_gpu_pools_with_explicit_capacity_pass(capacity):
    """The real reservation pool; spot or flex-start instead of the reservation."""
    pool = _gpu_pool()
    if capacity != "reservation":
        del pool["inputs"]["nodeConfig"]["reservationAffinity"]
        pool["inputs"]["nodeConfig"][capacity] = True
    assert violations("gpu-capacity-explicit", [pool]) == []
    assert violations("gpu-capacity-explicit", [one(resources(), NODE_POOL, "gke-system-pool")]) == []


@pytest.mark.parametrize("affinity", [None, {"consumeReservationType": "ANY_RESERVATION"}])
def test_an_on_demand_gpu_pool_is_a_violation(affinity):
    """No reservation, or 'any reservation' (falls back to on demand): reported."""
    pool = _gpu_pool("a4x")
    pool["inputs"]["nodeConfig"]["reservationAffinity"] = affinity
    [message] = violations("gpu-capacity-explicit", [pool])
    assert "on-demand" in message


# --- Node service account ----------------------------------------------------------------------


def test_a_pool_with_a_dedicated_service_account_passes():
    """The GPU pool on a stack-owned account passes."""
    pool = _gpu_pool()
    pool["inputs"]["nodeConfig"]["serviceAccount"] = "verl-a4-nodes@example-project.iam.gserviceaccount.com"
    assert violations("nodes-dedicated-service-account", [pool]) == []


@pytest.mark.parametrize("account", [None, "default", "000000000000-compute@developer.gserviceaccount.com"])
def test_a_pool_on_the_default_service_account_is_a_violation(account):
    """Unset, 'default', or the project's Compute Engine default account."""
    pool = _gpu_pool()
    assert violations("nodes-dedicated-service-account", [pool]) == []  # the program's own
    if account:
        pool["inputs"]["nodeConfig"]["serviceAccount"] = account
    else:
        del pool["inputs"]["nodeConfig"]["serviceAccount"]
    [message] = violations("nodes-dedicated-service-account", [pool])
    assert "Compute Engine default service account" in message


def test_an_autopilot_cluster_is_checked_in_its_auto_provisioning_defaults():
    """Autopilot has no pools: the account lives in clusterAutoscaling.autoProvisioningDefaults."""
    cluster = one(resources("a4", "autopilot"), CLUSTER)
    assert violations("nodes-dedicated-service-account", [cluster]) == []  # the program's own
    del cluster["inputs"]["clusterAutoscaling"]["autoProvisioningDefaults"]["serviceAccount"]
    [message] = violations("nodes-dedicated-service-account", [cluster])
    assert message.startswith("clusterAutoscaling.autoProvisioningDefaults.serviceAccount is unset")
    cluster["inputs"].setdefault("clusterAutoscaling", {})["autoProvisioningDefaults"] = {
        "serviceAccount": "verl-a4-nodes@example-project.iam.gserviceaccount.com"}
    assert violations("nodes-dedicated-service-account", [cluster]) == []


# --- Control plane -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_the_programs_control_plane_is_not_open(mode):
    """The program's cluster (DNS endpoint only) passes, in both modes, and so does one that
    keeps its IP endpoint behind controlPlaneCidrs."""
    cluster = one(resources("a4", mode), CLUSTER)
    assert violations("control-plane-not-open", [cluster]) == []
    cluster["inputs"]["controlPlaneEndpointsConfig"]["ipEndpointsConfig"]["enabled"] = True
    cluster["inputs"]["masterAuthorizedNetworksConfig"] = {"cidrBlocks": [{"cidrBlock": "203.0.113.0/24"}]}
    assert violations("control-plane-not-open", [cluster]) == []


@pytest.mark.parametrize("change, expected", [
    # The cluster as this program sent it before the DNS endpoint: IP endpoint on by default.
    (lambda c: c.pop("controlPlaneEndpointsConfig"), "takes any address"),
    (lambda c: c["controlPlaneEndpointsConfig"]["ipEndpointsConfig"].pop("enabled"), "takes any address"),
    (lambda c: c["controlPlaneEndpointsConfig"].update(ipEndpointsConfig={"enabled": True}), "takes any address"),
    (lambda c: c.update(controlPlaneEndpointsConfig={"ipEndpointsConfig": {"enabled": True}},
                        masterAuthorizedNetworksConfig={"cidrBlocks": [{"cidrBlock": "0.0.0.0/0"}]}),
     "allows 0.0.0.0/0, every address"),
    (lambda c: c.update(controlPlaneEndpointsConfig={"ipEndpointsConfig": {"enabled": True}},
                        masterAuthorizedNetworksConfig={"gcpPublicCidrsAccessEnabled": True}),
     "gcpPublicCidrsAccessEnabled"),
], ids=["no-endpoints-config", "enabled-unset", "enabled", "all-addresses", "gcp-public-cidrs"])
def test_a_public_ip_endpoint_open_to_all_is_a_violation(change, expected):
    """An IP endpoint, public (no enablePrivateEndpoint), with no authorized networks or one
    that lets everyone in, fails; made private, the same cluster passes."""
    cluster = one(resources(), CLUSTER)
    change(cluster["inputs"])
    [message] = violations("control-plane-not-open", [cluster])
    assert expected in message and "verl-gke:controlPlaneCidrs" in message
    cluster["inputs"]["privateClusterConfig"]["enablePrivateEndpoint"] = True
    assert violations("control-plane-not-open", [cluster]) == []


# --- Fixed names -------------------------------------------------------------------------------


def test_fixed_name_resources_of_every_stack_are_deleted_first():
    """Cluster, pools, VPCs, subnets, firewall, placement policy: all deleteBeforeReplace."""
    for stack in ("a4", "a4x"):
        assert violations("fixed-name-delete-first", resources(stack)) == []


@pytest.mark.parametrize(
    ("type_", "name"),
    [("gcp:serviceaccount/account:Account", "node-identity-account"),
     ("gcp:artifactregistry/repository:Repository", "images-repository"),
     ("gcp:logging/metric:Metric", "observability-metric-step")],
)
def test_ids_other_than_name_are_fixed_names_too(type_, name):
    """A service account's accountId and a repository's repositoryId name them like `name`."""
    resource = one(resources(), type_, name)
    assert violations("fixed-name-delete-first", [resource]) == []
    resource["options"]["deleteBeforeReplace"] = False
    [message] = violations("fixed-name-delete-first", [resource])
    assert "is a fixed name" in message


def test_a_fixed_name_created_first_is_a_violation_and_an_auto_name_is_not():
    """Without deleteBeforeReplace a named pool is reported; an auto-named one needs nothing."""
    pool = _gpu_pool()
    pool["options"]["deleteBeforeReplace"] = False
    [message] = violations("fixed-name-delete-first", [pool])
    assert "'gpu-pool' is a fixed name" in message
    pool["inputs"]["name"] = "gpu-pool-1a2b3c4"
    assert violations("fixed-name-delete-first", [pool]) == []


# --- Labels ------------------------------------------------------------------------------------


def test_labelable_is_read_from_pulumi_gcps_args_classes():
    """ClusterArgs takes resource_labels, BucketArgs labels; NodePoolArgs and NetworkArgs neither."""
    assert label_input(CLUSTER) == "resourceLabels"
    assert label_input(BUCKET) == "labels"
    assert label_input(NODE_POOL) is None
    assert label_input("gcp:compute/network:Network") is None
    assert label_input("gcp:compute/router:Router") is None


def test_every_labelable_resource_of_the_program_is_labelled():
    """Cluster (resourceLabels), bucket, mirror repository, alert policies ... all carry the
    stack, target and cluster labels; the rule saw more than one labelable type."""
    found = resources()
    labelable = {r["type"] for r in found if r["type"].startswith("gcp:") and label_input(r["type"])}
    assert {CLUSTER, BUCKET} < labelable
    assert violations("gcp-labels", found) == []


@pytest.mark.parametrize("type_", [CLUSTER, BUCKET])
def test_an_unlabelled_labelable_resource_is_a_violation(type_):
    """Labels removed, or only the user's left: reported with the missing keys."""
    resource = one(resources(), type_)
    key = label_input(type_)
    del resource["inputs"][key]
    [message] = violations("gcp-labels", [resource])
    assert message.startswith(f"{key} lacks verl-gke-stack, verl-gke-target, verl-gke-cluster")
    resource["inputs"][key] = {"team": "ml", "verl-gke-stack": "a4"}
    [message] = violations("gcp-labels", [resource])
    assert message.startswith(f"{key} lacks verl-gke-target, verl-gke-cluster")


# --- Secrets -----------------------------------------------------------------------------------


def test_the_token_kubeconfig_and_job_access_are_secrets_in_every_stack():
    """The HF token Secret, the Kubernetes provider's kubeconfig and the job's access record."""
    for stack, mode in (("a4", "standard"), ("a4x", "standard")):
        found = resources(stack, mode)
        assert {r["type"] for r in found} >= {K8S_SECRET, K8S_PROVIDER, GRPO_RUN}
        assert violations("credentials-are-secrets", found) == []


def test_tracker_keys_reach_the_cluster_only_as_secrets(monkeypatch):
    """With wandb configured (`--secret verl-gke:wandbApiKey`), its key travels in the trackers
    Secret as a secret and the pack passes; the same key in plain text is reported."""
    original = plan.stack_inputs

    def with_wandb(stack, mode=None, overrides=None, config_file=None):
        inputs = original(stack, mode, overrides, config_file)
        inputs.config["verl-gke:wandbApiKey"] = "wandb-EXAMPLE-KEY"
        inputs.secret_keys.append("verl-gke:wandbApiKey")
        inputs.config["verl-gke:job"] = json.dumps({"logger": "[console,wandb]"})
        return inputs

    monkeypatch.setattr(plan, "stack_inputs", with_wandb)
    inputs, recording = plan.run_program("a4", "standard")
    found = plan.plan_document("a4", inputs, recording)["resources"]
    trackers = one(found, K8S_SECRET, "trackers-secret")
    assert trackers["inputs"]["data"] == {"WANDB_API_KEY": "[secret]"}
    assert violations("credentials-are-secrets", found) == []
    trackers["inputs"]["data"]["WANDB_API_KEY"] = "d2FuZGItRVhBTVBMRS1LRVk="
    [message] = violations("credentials-are-secrets", [trackers])
    assert message.startswith("data.WANDB_API_KEY holds a credential in plain text")


@pytest.mark.parametrize("leak", ["hf token", "kubeconfig", "job kubeconfig", "tracker key env", "container env"])
def test_a_credential_in_plain_text_is_a_violation(leak):
    """Each place a credential travels, given a plain value, is reported with its path."""
    found = resources()
    if leak == "hf token":
        target = one(found, K8S_SECRET, "storage-hf-secret")
        target["inputs"]["data"]["hf_api_token"] = "aGZfcGxhaW4="
        expected = "data.hf_api_token"
    elif leak == "kubeconfig":
        target = one(found, K8S_PROVIDER)
        target["inputs"]["kubeconfig"] = "apiVersion: v1\nkind: Config\n"
        expected = "kubeconfig"
    elif leak == "job kubeconfig":
        target = one(found, GRPO_RUN)
        target["inputs"]["access"]["kubeconfig"] = "apiVersion: v1"
        expected = "access.kubeconfig"
    elif leak == "tracker key env":
        target = one(found, GRPO_RUN)
        target["inputs"]["runtime_env"]["env_vars"]["WANDB_API_KEY"] = "0123abcd"
        expected = "runtime_env.env_vars.WANDB_API_KEY"
    else:
        target = one(found, RAY_CLUSTER)
        container = target["inputs"]["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        container.setdefault("env", []).append({"name": "WANDB_API_KEY", "value": "0123abcd"})
        expected = "env WANDB_API_KEY"
    [message] = violations("credentials-are-secrets", [target])
    assert message.startswith(expected + " holds a credential in plain text")


def test_charts_and_manifest_files_that_bring_images_are_pinned_too():
    """a4x's Helm releases name exact chart versions and the installer manifest a commit."""
    found = resources("a4x")
    kinds = {r["type"] for r in found}
    assert {HELM_RELEASE, "kubernetes:yaml/v2:ConfigFile"} <= kinds
    assert violations("images-pinned", [r for r in found if r["type"] in (HELM_RELEASE, *MANIFEST_FILES)]) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("chart range", "is not an exact version"),
        ("chart unset", "is not an exact version"),
        ("latest value", "values.image.tag floats an image"),
        ("branch manifest", "is read at 'master', not a commit"),
    ],
)
def test_a_floating_chart_or_manifest_is_a_violation(change, expected):
    """A chart version range or none, a Helm value asking for :latest, a manifest from a branch."""
    found = resources("a4x")
    release = one(found, HELM_RELEASE, "ray-kuberay-operator")
    manifest = one(found, "kubernetes:yaml/v2:ConfigFile")
    if change == "chart range":
        release["inputs"]["version"] = "^1.7"
    elif change == "chart unset":
        del release["inputs"]["version"]
    elif change == "latest value":
        release["inputs"]["values"]["image"] = {"repository": "kuberay/operator", "tag": "latest"}
    else:
        manifest["inputs"]["file"] = re.sub(r"/[0-9a-f]{40}/", "/master/", manifest["inputs"]["file"])
    [message] = violations("images-pinned", [release, manifest])
    assert expected in message


# --- the pack as the engine talks to it --------------------------------------------------------


def _served_pack():
    """The analyzer service policy/__main__.py starts, without its gRPC server around it."""
    from pulumi_policy.policy import _PolicyAnalyzerServicer

    rules.show_secrets_as_the_plan_does()
    return _PolicyAnalyzerServicer(
        rules.PACK_NAME, "0.1.0", rules.POLICIES, pulumi_policy.EnforcementLevel.MANDATORY,
        None, None, None, None, None, None, None,
    )


def _analyze_request(resource: dict, secret_paths: tuple[str, ...] = ()):
    """An AnalyzeRequest as the engine sends it: inputs as a Struct, the values at
    `secret_paths` wrapped in Pulumi's secret signature (real values, not "[secret]")."""
    from google.protobuf import json_format, struct_pb2
    from pulumi.runtime import proto
    from pulumi_policy import deserialize

    properties = copy.deepcopy(resource["inputs"])
    for path in secret_paths:
        *parents, leaf = path.split(".")
        holder = properties
        for key in parents:
            holder = holder[key]
        holder[leaf] = {deserialize.SPECIAL_SIG_KEY: deserialize.SPECIAL_SECRET_SIG, "value": "hf_REALVALUE"}
    struct = struct_pb2.Struct()
    json_format.ParseDict(properties, struct)
    options = proto.AnalyzerResourceOptions(
        protect=bool(resource["options"].get("protect")),
        deleteBeforeReplace=bool(resource["options"].get("deleteBeforeReplace")),
        deleteBeforeReplaceDefined=True,
    )
    return proto.AnalyzeRequest(type=resource["type"], properties=struct, urn=resource["urn"],
                                name=resource["name"], options=options)


def test_the_served_pack_reports_what_make_policy_reports():
    """Through the analyzer service `pulumi preview` talks to: the secret token passes, the same
    token sent in plain text fails credentials-are-secrets, and a GPU pool without its service
    account fails exactly the rule it fails offline."""
    servicer = _served_pack()
    secret = one(resources(), K8S_SECRET, "storage-hf-secret")
    ok = servicer.Analyze(_analyze_request(secret, ("data.hf_api_token",)), None)
    assert [d.policyName for d in ok.diagnostics] == []
    secret["inputs"]["data"]["hf_api_token"] = "aGZfUkVBTFZBTFVF"
    leaked = servicer.Analyze(_analyze_request(secret), None)
    assert [d.policyName for d in leaked.diagnostics] == ["credentials-are-secrets"]
    assert "aGZfUkVBTFZBTFVF" not in leaked.diagnostics[0].message
    pool = _gpu_pool()
    assert not servicer.Analyze(_analyze_request(pool), None).diagnostics
    del pool["inputs"]["nodeConfig"]["serviceAccount"]
    online = servicer.Analyze(_analyze_request(pool), None)
    offline = policy_check.check_resources([pool])
    assert sorted(d.policyName for d in online.diagnostics) == sorted(v.policy for v in offline) == [
        "nodes-dedicated-service-account"]


def test_make_policy_checks_a_plan_with_only_the_packs_requirements(tmp_path):
    """`make policy` runs tools.policy_check --plan in .venv-policy, which holds only
    policy/requirements.txt (pulumi-policy, pulumi, pulumi-gcp): checking a rendered plan must
    import none of the program's other packages."""
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"stack": "a4", "resources": resources(), "outputs": {}}))
    probe = ("import sys\nfrom tools import policy_check\n"
             f"code = policy_check.main(['--plan', {str(plan_file)!r}])\n"
             "print(sorted({m.split('.')[0] for m in sys.modules}))\nsys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=plan.ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"')))
    requirements = (plan.ROOT / "policy" / "requirements.txt").read_text()
    assert {"pulumi_policy", "pulumi", "pulumi_gcp"} <= loaded
    assert loaded.isdisjoint({"pydantic", "pulumi_kubernetes", "ray", "hydra", "omegaconf",
                              "requests", "jsonschema", "torch"})
    assert all(f"{p}==" in requirements for p in ("pulumi-policy", "pulumi", "pulumi-gcp"))
