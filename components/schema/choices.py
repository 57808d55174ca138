"""Closed sets the user picks from in the stack config (components/schema/config.py)."""

from __future__ import annotations

import enum


class ClusterMode(str, enum.Enum):
    """`verl-gke:clusterMode`: who manages the nodes."""

    STANDARD = "standard"
    AUTOPILOT = "autopilot"


class Capacity(str, enum.Enum):
    """`verl-gke:provisioning`: where the GPU nodes of a Standard cluster come from."""

    RESERVATION = "reservation"
    SPOT = "spot"
    FLEX_START = "flex-start"
