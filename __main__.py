"""verl-gke: a GKE GPU cluster running GRPO fine-tuning with verl on Ray, as one Pulumi stack.

The stack's config is read and validated once (components/schema/config.py); each concern is one
component; the training job is the last resource. `make plan STACK=<stack>` runs this same file
under Pulumi's mock runtime.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.schema import config
from components.storage.gcs_fuse_storage import GcsFuseStorage, GcsFuseStorageArgs
from components.cluster.gke_cluster import SYSTEM_POOL, GkeCluster, GkeClusterArgs
from components.cluster.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.ray.cluster_check import ClusterCheck, ClusterCheckArgs
from components.ray.grpo_job import GrpoJob, GrpoJobArgs
from components.schema.run import checkpoint_uri, runtime_env
from components.facts.hardware import NodeNetworking
from components.facts.layout import HF_SECRET_NAME
from components.storage.model_staging import ModelStaging, ModelStagingArgs
from components.cluster.nccl_installer import NcclInstaller, NcclInstallerArgs
from components.cluster.nvidia_dra_driver import NvidiaDraDriver, NvidiaDraDriverArgs
from components.network.rdma_networks import RdmaNetworks, RdmaNetworksArgs
from components.ray.trackers import TrackerCredentials, TrackerCredentialsArgs
from components.ray.verl_ray_cluster import RayOperator, VerlRayCluster, VerlRayClusterArgs

cfg = config.from_pulumi()
hw = cfg.hardware
dranet = hw.networking is NodeNetworking.DRANET

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

gke = GkeCluster(
    "gke",
    GkeClusterArgs(
        project=cfg.project,
        region=cfg.region,
        cluster_name=cfg.cluster_name,
        autopilot=cfg.autopilot,
        min_version=config.MIN_GKE_VERSION,
        deletion_protection=cfg.deletion_protection,
        exclusion_start=cfg.exclusion_start,
        ray_addon=not dranet,
        dra_beta_apis=dranet,
    ),
)
in_cluster = pulumi.ResourceOptions(providers=[gke.provider])

# What must exist before GPU pods can be scheduled: the GPU pool and the network objects.
ray_prerequisites: list[pulumi.Resource] = []
if not cfg.autopilot:
    ray_prerequisites.append(
        GpuNodePool(
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
                node_networks=networks.node_networks if networks else [],
            ),
        )
    )
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
        delete_bucket_on_destroy=cfg.delete_bucket_on_destroy,
    ),
    opts=in_namespace,
)

staging = ModelStaging(
    "staging",
    ModelStagingArgs(
        staging=cfg.staging,
        namespace=cfg.namespace,
        service_account=storage.service_account,
        pvc_name=storage.pvc_name,
        hf_secret_name=storage.hf_secret_name or HF_SECRET_NAME,
        node_selector=system_nodes,
    ),
    opts=in_namespace,
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
        opts=pulumi.ResourceOptions.merge(in_namespace, pulumi.ResourceOptions(depends_on=ray_prerequisites)),
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
        rdma_networks=networks.pod_networks if networks else (),
        # A4X puts the head on a GB200 node (arm64-only image); Autopilot picks its own node.
        head_node_selector=None if dranet or cfg.autopilot else system_nodes,
        rdma_claim_template=dra.rdma_claim_template if dra else None,
        compute_domain_claim_template=dra.compute_domain_claim_template if dra else None,
        operator=RayOperator.HELM if dranet else RayOperator.GKE_ADDON,
        tracker_secret=trackers.secret_name,
    ),
    opts=pulumi.ResourceOptions.merge(
        in_namespace, pulumi.ResourceOptions(depends_on=[*ray_prerequisites, installer])
    ),
)

# GPUs, RDMA fabric and bucket checked before any GPU hour goes to training.
check = None
if not cfg.run.skip_cluster_check:
    check = ClusterCheck(
        "cluster-check",
        ClusterCheckArgs(
            profile=hw,
            nodes=cfg.nodes,
            model_path=staging.model_path,
            runtime_env=runtime_env(hw, cfg.nodes),
            namespace=cfg.namespace,
            head_service=ray.head_service,
            kubeconfig=gke.kubeconfig,
            dashboard_address=cfg.run.dashboard_address,
        ),
        opts=pulumi.ResourceOptions(depends_on=[staging]),
    )

# The final resource: the training run, once the RayCluster is ready and the bucket is filled.
job = GrpoJob(
    "grpo",
    GrpoJobArgs(
        run=cfg.run,
        profile=hw,
        nodes=cfg.nodes,
        checkpoint_uri=storage.bucket_url.apply(checkpoint_uri),
        namespace=cfg.namespace,
        head_service=ray.head_service,
        kubeconfig=gke.kubeconfig,
        model_revision=cfg.model_revision,
        # A re-staging replaces (first stops) the run: no file under /data changes beneath it.
        staged=staging.job_name,
        checked=check.check_id if check else None,
    ),
    opts=pulumi.ResourceOptions(depends_on=[staging]),
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
    },
)
pulumi.export(
    "job",
    {
        "submissionId": job.submission_id,
        "status": job.status,
        "startTime": job.start_time,
        "endTime": job.end_time,
        "dashboardPath": job.dashboard_path,
        "entrypoint": job.entrypoint,
        "metrics": job.metrics,
        "checkpointUri": job.checkpoint_uri,
        "runDir": job.run_dir,
        "modelUri": job.model_uri,
        "exportStatus": job.export_status,
    },
)
pulumi.export(
    "clusterCheck",
    {
        "status": check.status,
        "busBandwidthGbs": check.bus_bandwidth_gbs,
        "readMbps": check.read_mbps,
        "inventory": check.inventory,
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
    },
)
