"""NcclInstaller: the gIB NCCL plugin DaemonSet that puts NCCL and its RDMA plugin on GPU nodes.

Applies Google's installer manifest for the cluster's kind (Standard, Autopilot, or A4X's arm64
gIB build) from a pinned commit of container-engine-accelerators (components/facts/pins.py), where the
tutorial applies `master`. The DaemonSet writes /home/kubernetes/bin/gib on every GPU node, which
the Ray workers mount at /usr/local/gib.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.facts import pins
from components.facts.hardware import HardwareProfile, NodeNetworking
from components.options import child_options


def installer_url(hardware: HardwareProfile, autopilot: bool) -> str:
    if hardware.networking is NodeNetworking.DRANET:
        return pins.NCCL_INSTALLER_A4X
    return pins.NCCL_INSTALLER_AUTOPILOT if autopilot else pins.NCCL_INSTALLER_STANDARD


@dataclass(frozen=True)
class NcclInstallerArgs:
    hardware: HardwareProfile
    autopilot: bool


class NcclInstaller(pulumi.ComponentResource):
    url: str

    def __init__(
        self, name: str, args: NcclInstallerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """`opts.providers` must carry the cluster's Kubernetes provider."""
        super().__init__("verl-gke:index:NcclInstaller", name, None, opts)
        self.url = installer_url(args.hardware, args.autopilot)
        self.manifest = k8s.yaml.v2.ConfigFile(
            f"{name}-manifest", file=self.url, opts=child_options(self, opts)
        )
        self.register_outputs({"url": self.url})
