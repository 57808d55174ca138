"""verl-gke: a GKE GPU cluster running GRPO fine-tuning with verl on Ray, as one Pulumi stack.

The stack's config is read and validated once (components/schema/config.py); each concern is one
component; the training job is the last resource. `make plan STACK=<stack>` runs this same file
under Pulumi's mock runtime.
"""

import pulumi
import pulumi_kubernetes as k8s

from components import preflight
from components.preflight import model_shape
from components.cluster.gke_cluster import SYSTEM_POOL, GkeCluster, GkeClusterArgs
from components.cluster.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.cluster.image_prepull import ImagePrepull, ImagePrepullArgs
from components.cluster.nccl_installer import NcclInstaller, NcclInstallerArgs
from components.cluster.node_identity import NodeIdentity, NodeIdentityArgs
from components.cluster.nvidia_dra_driver import NvidiaDraDriver, NvidiaDraDriverArgs
from components.facts import pins
from components.facts.hardware import NodeNetworking
from components.facts.layout import HF_SECRET_NAME
from components.guards import GUARD_NAME, BucketIdentity, DeletionProtection
from components.network.primary_network import (
    PODS_RANGE,
    SERVICES_RANGE,
    PrimaryNetwork,
    PrimaryNetworkArgs,
)
from components.network.rdma_networks import RdmaNetworks, RdmaNetworksArgs
from components.observability.scope import Scope
from components.observability.training_observability import (
    TrainingObservability,
    TrainingObservabilityArgs,
)
from components.check.cluster_check import ClusterCheck, ClusterCheckArgs
from components.run.grpo_job import GrpoJob, GrpoJobArgs
from components.run.supervision import RunSupervisor, RunSupervisorArgs
from components.run.trackers import TrackerCredentials, TrackerCredentialsArgs
from components.raycluster.ray_cluster_args import CLUSTER_NAMES, RayOperator, VerlRayClusterArgs
from components.raycluster.verl_ray_cluster import VerlRayCluster
from components.registry.image_mirror import ImageMirror, ImageMirrorArgs
from components.schema import config, names
from components.runspec.run import checkpoint_uri
from components.schema.staging import model_path as staged_model_path
from components.storage.gcs_fuse_storage import GcsFuseStorage, GcsFuseStorageArgs
from components.storage import model_staging
from components.storage.model_staging import LABELS as STAGING_LABELS
from components.storage.model_staging import ModelStaging, ModelStagingArgs
from components.storage.working_dir import WorkingDirUpload, WorkingDirUploadArgs

cfg = config.from_pulumi()
hw = cfg.hardware
dranet = hw.networking is NodeNetworking.DRANET
# Invokes against the live project (they run at preview too); nothing exists yet if they fail.
found = preflight.run(cfg)
# The run, resolved once (components/runspec/run.py ResolvedRun): its sizes for the cluster and
# the model's shape (read from the Hub at preview; shipped for the default model, whose run the
# config already resolved), every path as the pods read it (docs/your-own-experiment.md), its
# directory, command and problems; a TP or memory that cannot work stops here. One per stack
# today: every component below takes this value.
(run,) = model_shape.checked_runs(cfg).values()

# Registered first: a renamed or moved bucket stops the update before anything is touched.
bucket_identity = BucketIdentity("bucket-identity", cfg.bucket, cfg.region.upper(), cfg.project)

networks = None
if not dranet:
    networks = RdmaNetworks(
        "networks",
        RdmaNetworksArgs(
            project=cfg.project,
            region=cfg.region,
            zone=cfg.zone,
            gvnic_prefix=cfg.gvnic_prefix,
            rdma_prefix=cfg.rdma_prefix,
            nic_count=hw.rdma_nics,
        ),
    )

# Every node runs as the stack's own least-privilege account, in the stack's own network (or the
# user's), never as the Compute Engine default account on the `default` VPC.
nodes_identity = NodeIdentity(
    "node-identity",
    NodeIdentityArgs(
        project=cfg.project,
        account_id=names.node_service_account_id(cfg.cluster),
        cluster_name=cfg.cluster,
    ),
)
primary = None
if not cfg.network:
    primary = PrimaryNetwork(
        "primary-network",
        PrimaryNetworkArgs(
            project=cfg.project,
            region=cfg.region,
            cluster_name=cfg.cluster,
            egress_connections_per_vm=model_staging.PEAK_CONNECTIONS,
        ),
    )

# The nodes' roles are granted, and their way out exists, before any node starts (logging,
# image pulls); the control plane is created meanwhile.
node_prerequisites = (nodes_identity, *([primary] if primary else []))

gke = GkeCluster(
    "gke",
    GkeClusterArgs(
        project=cfg.project,
        region=cfg.region,
        zone=cfg.zone,
        cluster_name=cfg.cluster,
        autopilot=cfg.autopilot,
        version=found.gke_version,
        deletion_protection=cfg.deletion_protection,
        exclusion_start=cfg.exclusion_start,
        ray_addon=not dranet,
        dra_beta_apis=dranet,
        network=primary.network if primary else cfg.network,
        subnetwork=primary.subnetwork if primary else cfg.subnetwork,
        secondary_ranges=(PODS_RANGE, SERVICES_RANGE) if primary else None,
        node_service_account=nodes_identity.email,
        labels=cfg.resource_labels,
        control_plane_cidrs=tuple(cfg.control_plane_cidrs),
        node_prerequisites=node_prerequisites,
    ),
    # The cluster names none of the VPCs (they are additional node and pod networks), so
    # without this edge `pulumi destroy` could delete them, and the gVNIC firewall nothing
    # names, before the cluster and even the job: networks go last (tests/test_destroy_order.py).
    opts=pulumi.ResourceOptions(depends_on=networks.cloud_resources if networks else None),
)
in_cluster = pulumi.ResourceOptions(providers=[gke.provider])

# Every pod pulls the verl and staging images through the region's cache of Docker Hub.
images = ImageMirror(
    "images",
    ImageMirrorArgs(
        project=cfg.project,
        region=cfg.region,
        repository_id=names.mirror_repository_id(cfg.cluster),
        labels=cfg.resource_labels,
    ),
)

# What must exist before GPU pods can be scheduled: the GPU pool and the network objects.
ray_prerequisites: list[pulumi.Resource] = []
gpu_pool: GpuNodePool | None = None
if not cfg.autopilot:
    gpu_pool = GpuNodePool(
        "gpu",
        GpuNodePoolArgs(
            project=cfg.project,
            region=cfg.region,
            zone=cfg.zone,
            cluster=gke.name,
            hardware=hw,
            nodes=cfg.nodes,
            capacity=cfg.provisioning,
            reservation=cfg.reservation,
            placement_policy=cfg.placement_policy,
            service_account=nodes_identity.email,
            labels=cfg.resource_labels,
            node_networks=networks.node_networks if networks else [],
        ),
        opts=pulumi.ResourceOptions(depends_on=list(node_prerequisites)),
    )
    ray_prerequisites.append(gpu_pool)
if networks:
    ray_prerequisites += networks.map_into_cluster(gke.provider)

# Objects in the workload namespace wait for it when the program creates it.
namespace_deps: list[pulumi.Resource] = []
if cfg.namespace != "default":
    namespace_deps.append(
        k8s.core.v1.Namespace(
            "workload-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=cfg.namespace),
            opts=pulumi.ResourceOptions(provider=gke.provider),
        )
    )
in_namespace = pulumi.ResourceOptions(providers=[gke.provider], depends_on=namespace_deps)
# CPU work (Ray head on A4 / A3 Ultra, staging) runs on the system pool on Standard clusters.
system_nodes = {} if cfg.autopilot else {"cloud.google.com/gke-nodepool": SYSTEM_POOL}

installer = NcclInstaller(
    "nccl", NcclInstallerArgs(hardware=hw, autopilot=cfg.autopilot), opts=in_cluster
)

# Each GPU node, and on A4 / A3 Ultra the head's system pool, starts pulling the verl image as
# it registers instead of once the RayCluster exists; never awaited (components/cluster/
# image_prepull.py). Not on Autopilot, where a node exists only for the pod that pulls it.
prepull = None
if not cfg.autopilot:
    prepull = ImagePrepull(
        "verl-image",
        ImagePrepullArgs(
            profile=hw,
            image=images.ref(run.image or pins.VERL_IMAGES[hw.arch]),  # the RayCluster's image
            namespace=cfg.namespace,
            head_on_system_pool=not dranet,
        ),
        opts=pulumi.ResourceOptions.merge(
            in_namespace, pulumi.ResourceOptions(depends_on=[images])
        ),
    )

storage = GcsFuseStorage(
    "storage",
    GcsFuseStorageArgs(
        project=cfg.project,
        region=cfg.region,
        bucket_name=cfg.bucket,
        namespace=cfg.namespace,
        service_account=cfg.service_account,
        hf_token=pulumi.Output.secret(cfg.hf_token.get_secret_value()) if cfg.hf_token else None,
        arch=hw.arch,
        workload_cluster=gke.cluster,
        delete_bucket_on_destroy=cfg.delete_bucket_on_destroy,
        labels=cfg.resource_labels,
        adopt=found.bucket is not None,
        bucket_guard=bucket_identity,
        claim_after=[gpu_pool] if gpu_pool else (),
    ),
    opts=in_namespace,
)

staging = ModelStaging(
    "staging",
    ModelStagingArgs(
        staging=cfg.staging,
        namespace=cfg.namespace,
        service_account=storage.service_account,
        bucket_name=storage.mount_bucket_name,  # waits for the KSA's grant, as the PV does
        hf_secret_name=storage.hf_secret_name or HF_SECRET_NAME,
        node_selector=system_nodes,
        image=images.ref(pins.STAGING_IMAGE),
        # The default model and GSM8K only when the run reads them.
        skip_steps=model_staging.skipped_steps(
            [run.settings.model_path, run.settings.train_files, run.settings.val_files],
            staged_model_path(cfg.staging.model_id),
        ),
    ),
    opts=pulumi.ResourceOptions.merge(in_namespace, pulumi.ResourceOptions(depends_on=[images])),
)

# A local working directory, uploaded by content (a gs:// one is in the bucket already).
upload = None
if run.upload_dir is not None:
    upload = WorkingDirUpload(
        "working-dir",
        WorkingDirUploadArgs(directory=run.upload_dir, bucket_name=storage.bucket_name),
    )

# The experiment trackers' keys, for the Ray pods only (never job inputs).
trackers = TrackerCredentials(
    "trackers",
    TrackerCredentialsArgs(namespace=cfg.namespace, env=config.tracker_env(cfg)),
    opts=in_namespace,
)

dra = None
if dranet:
    dra = NvidiaDraDriver(
        "dra",
        NvidiaDraDriverArgs(profile=hw, nodes=cfg.nodes, workload_namespace=cfg.namespace),
        # Installed while the GPU nodes are created: its kubelet plugin DaemonSet starts on
        # them when they join, and nothing in the chart waits for a GPU node.
        opts=in_namespace,
    )

ray = VerlRayCluster(
    "ray",
    VerlRayClusterArgs(
        profile=hw,
        mode=cfg.cluster_mode,
        nodes=cfg.nodes,
        namespace=cfg.namespace,
        service_account=storage.service_account,
        pvc_name=storage.pvc_name,
        bucket_name=storage.mount_bucket_name,
        rdma_networks=networks.pod_networks if networks else (),
        # A4X puts the head on a GB200 node (arm64-only image); Autopilot picks its own node.
        head_node_selector=None if dranet or cfg.autopilot else system_nodes,
        rdma_claim_template=dra.rdma_claim_template if dra else None,
        compute_domain_claim_template=dra.compute_domain_claim_template if dra else None,
        operator=RayOperator.HELM if dranet else RayOperator.GKE_ADDON,
        tracker_secret=trackers.secret_name,
        # job.image, or the pinned verl image; either through the region's mirror.
        image=images.ref(run.image),
        pod_prerequisites=[*ray_prerequisites, installer, images],
        capacity=cfg.provisioning,  # bounds the RayCluster's wait (ray_cluster_spec.py)
    ),
    opts=in_namespace,
)

# GPUs, RDMA fabric and bucket checked before any GPU hour goes to training.
check = None
if not run.lifecycle.skip_cluster_check:
    check = ClusterCheck(
        "cluster-check",
        ClusterCheckArgs(
            profile=hw,
            nodes=cfg.nodes,
            # The model the run reads (staging skips the default one when it is not that).
            model_path=run.settings.model_path,
            runtime_env=run.worker_env,
            namespace=cfg.namespace,
            head_service=ray.head_service,
            kubeconfig=gke.kubeconfig,
            dashboard_address=run.lifecycle.dashboard_address,
            # The gate in front of Ray: a released (suspended) cluster is resumed before the
            # check runs, and a delete on it needs no Ray (components/run/kube.py gate).
            ray_cluster=ray.cluster_name,
        ),
        opts=pulumi.ResourceOptions(depends_on=[staging]),
    )

# The supervisor's state first: the job's provider notes in it each attempt it submits (with
# the run's first start) and its mark, from the run's first submission on (run/supervision.py).
supervisor = RunSupervisor("grpo-supervisor", cfg.namespace, opts=in_namespace)

# The final resource: the training run, once the RayCluster is ready and the bucket is filled.
job = GrpoJob(
    "grpo",
    GrpoJobArgs(
        run=run,
        checkpoint_uri=storage.bucket_url.apply(checkpoint_uri),
        namespace=cfg.namespace,
        head_service=ray.head_service,
        kubeconfig=gke.kubeconfig,
        # A re-staging replaces (first stops) the run: no file under /data changes beneath it.
        staged=staging.job_name,
        checked=check.check_id if check else None,
        ray_cluster=ray.cluster_name,
        supervisor_state=supervisor.state_config_map,
        # New Ray pods (image, shape) replace the run: the old attempt dies with its pods.
        ray_pods=ray.pods_digest,
    ),
    opts=pulumi.ResourceOptions(
        depends_on=[staging, supervisor.state, *([upload] if upload else [])]),
)

# Follows the run in the cluster once `pulumi up` has returned: retries, stalls, the deadline,
# the export and the release of the GPUs (components/run/supervision.py). Created after the job
# and deleted before it, so nothing resubmits a run that `pulumi destroy` ended.
supervisor.follow(
    RunSupervisorArgs(
        run=run.lifecycle,
        spec=job.supervision_spec,
        namespace=cfg.namespace,
        ray_cluster=ray.cluster_name,
        head_service=f"{ray.cluster_name}-head-svc",
        image=images.ref(pins.SUPERVISOR_IMAGE),
        node_selector=system_nodes,
    ),
    opts=pulumi.ResourceOptions.merge(
        in_namespace, pulumi.ResourceOptions(depends_on=[job, images])
    ),
)

# How to follow the long waits (staging's model download, the job) while `up` sits on them: the
# stack has no outputs until `up` ends, so the commands use the names the config decides.
if not pulumi.runtime.is_dry_run():
    kubectl = f"kubectl --namespace {cfg.namespace}"
    pulumi.log.info(
        "While `pulumi up` waits, follow it from another terminal:\n"
        f"  gcloud container clusters get-credentials {cfg.cluster} --location {cfg.region} "
        f"--project {cfg.project}\n"
        f"  {kubectl} logs --follow --container stage --selector "
        + ",".join(f"{k}={v}" for k, v in STAGING_LABELS.items()) + "   # staging\n"
        f"  {kubectl} port-forward svc/{CLUSTER_NAMES[hw.target]}-head-svc 8265:8265 &   "
        "# the Ray dashboard, on localhost only\n"
        "  python -m tools.logs --address http://127.0.0.1:8265   # the training job's log\n"
        f"Once `up` is done: make logs STACK={pulumi.get_stack()}"
    )

# Log-based training metrics, the training dashboard and the alerts (Cloud Logging/Monitoring).
observability = TrainingObservability(
    "observability",
    TrainingObservabilityArgs(
        scope=Scope(
            project=cfg.project, region=cfg.region, cluster_name=cfg.cluster,
            namespace=cfg.namespace,
        ),
        target=hw.target.value,
        notification_channel=cfg.alert_notification_channel,
        no_step_minutes=cfg.no_step_alert_minutes,
        labels=cfg.resource_labels,
        # Cloud Monitoring knows a new log-based metric only minutes after it is created.
        log_alerts_after=(ray.ray_cluster,),
    ),
)

# Deleted first by `pulumi destroy`, and protected while deletion protection is on: a destroy
# fails before the job, the RayCluster or any node is touched (components/guards.py).
DeletionProtection(
    GUARD_NAME,
    protected=cfg.deletion_protection,
    resources=[
        r
        for r in (
            bucket_identity, nodes_identity, primary, networks, gke, images, *ray_prerequisites,
            *namespace_deps, installer, prepull, storage, staging, upload, trackers, dra, ray,
            check, job, supervisor, observability,
        )
        if r is not None
    ],
)

pulumi.export("clusterName", gke.name)
pulumi.export("clusterLocation", gke.location)
pulumi.export("clusterEndpoint", gke.endpoint)
pulumi.export("kubeconfig", gke.kubeconfig)
pulumi.export("bucketName", storage.bucket_name)
pulumi.export("bucketUrl", storage.bucket_url)
pulumi.export("checkpointUri", storage.bucket_url.apply(checkpoint_uri))
pulumi.export(
    "hardware",
    {
        "target": hw.target.value,
        "gpuType": hw.gpu_type,
        "machineType": hw.machine_type,
        "gpusPerNode": hw.gpus_per_node,
        "nodes": cfg.nodes,
        "totalGpus": hw.gpus_per_node * cfg.nodes,
        "clusterMode": cfg.cluster_mode.value,
    },
)
pulumi.export(
    "rayCluster",
    {
        "name": ray.name,
        "headService": ray.head_service,
        "dashboardPort": ray.dashboard_port,
        "workerReplicas": ray.worker_replicas,
        "namespace": cfg.namespace,
        # kubectl port-forward listens on localhost only: the dashboard stays off the network.
        "dashboardCommand": pulumi.Output.concat(
            "gcloud container clusters get-credentials ", gke.name, " --location ", gke.location,
            f" --project {cfg.project} && kubectl --namespace {cfg.namespace} port-forward svc/",
            ray.head_service, f" {ray.dashboard_port}:{ray.dashboard_port}",
            f"  # then open http://127.0.0.1:{ray.dashboard_port}",
        ),
    },
)
pulumi.export("job", job.outputs())  # components/run/job_outputs.py
pulumi.export(
    "clusterCheck",
    {
        "status": check.status,
        "busBandwidthGbs": check.bus_bandwidth_gbs,
        "readMbps": check.read_mbps,
        "inventory": check.inventory,
        "expectedBusBandwidthGbs": check.expected_bus_bandwidth_gbs,
        "minBusBandwidthGbs": check.min_bus_bandwidth_gbs,
    }
    if check
    else {"status": "SKIPPED"},
)
pulumi.export(
    "staging",
    {"jobName": staging.job_name, "modelPath": staging.model_path, "marker": staging.marker_path},
)
pulumi.export(
    "consoleUrls",
    {
        "cluster": pulumi.Output.concat(
            "https://console.cloud.google.com/kubernetes/clusters/details/",
            gke.location, "/", gke.name, "/details?project=", cfg.project,
        ),
        "bucket": pulumi.Output.concat(
            "https://console.cloud.google.com/storage/browser/", storage.bucket_name,
            "?project=", cfg.project,
        ),
        "gpuMetrics": (
            "https://console.cloud.google.com/monitoring/dashboards/integration/"
            f"gke.nvidia-dcgm?project={cfg.project}"
        ),
        "trainingDashboard": observability.dashboard_url,
        "jobLogs": observability.logs_url,
    },
)
