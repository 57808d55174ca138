"""A target is one row: what differs per target is read from its hardware row
(components/facts/hardware.py), so a new row needs no other table."""

from __future__ import annotations

import dataclasses

from components.facts.expectations import EXPECTATIONS, _expect
from components.facts.hardware import PROFILES, NodeNetworking, Target
from components.raycluster.ray_cluster_args import CLUSTER_NAMES, cluster_name
from components.runspec.run import GrpoRunConfig
from components.runspec.run_sizing import resolve
from tools import step_model


def _new_row():
    """A made-up target: a4's row with another GPU, six NICs and the tutorial's a4x job."""
    a4, a4x = PROFILES[Target.A4], PROFILES[Target.A4X]
    return dataclasses.replace(
        a4, rdma_nics=6, gpu=dataclasses.replace(a4.gpu, name="X300"),
        tutorial_job=a4x.tutorial_job,
    )


def test_a_new_row_gets_its_expectations_name_and_run_defaults_from_the_row_alone():
    """Expectations (GPU name, NICs, what NCCL must report), the RayCluster's name and the
    per-target run defaults (optimizer steps per RL step, val_before_train) of a row that no
    table lists are derived from it: nothing else is keyed by target."""
    row = _new_row()
    expected = _expect(row)
    assert (expected.gpu_name, expected.nics_per_node) == ("X300", 6)
    assert (expected.nccl_network, expected.mnnvl) == ("gIB", False)  # its RDMA VPC networking
    assert cluster_name(row) == "x300-ray-cluster"
    resolved = resolve(GrpoRunConfig(), row, row.default_nodes)
    assert resolved.train_batch_size // resolved.ppo_mini_batch_size == 4  # a4x's job: 256/64
    assert resolved.val_before_train is None  # a4x's job leaves it to verl


def test_the_shipped_rows_give_what_the_tables_said():
    """The derived values are the ones the per-target tables held: b200/h200/gb200 cluster
    names, B200/H200/GB200 with 8/8/4 NICs, gIB on the RDMA VPC targets and MNNVL on A4X, one
    optimizer step per RL step on a4/a3u and four on a4x, val_before_train off on a4/a3u."""
    assert CLUSTER_NAMES == {Target.A4: "b200-ray-cluster", Target.A3_ULTRA: "h200-ray-cluster",
                             Target.A4X: "gb200-ray-cluster"}
    assert {t: (e.gpu_name, e.nics_per_node, e.nccl_network, e.mnnvl)
            for t, e in EXPECTATIONS.items()} == {
        Target.A4: ("B200", 8, "gIB", False), Target.A3_ULTRA: ("H200", 8, "gIB", False),
        Target.A4X: ("GB200", 4, None, True),
    }
    assert {t: (p.tutorial_job.optimizer_steps, p.tutorial_job.val_before_train)
            for t, p in PROFILES.items()} == {
        Target.A4: (1, False), Target.A3_ULTRA: (1, False), Target.A4X: (4, None),
    }


def test_the_tools_read_multi_node_nvlink_from_the_programs_own_env():
    """The step model (and so `make cost`) runs A4X's FSDP over multi-node NVLink because the
    job's runtime env turns NCCL's cuMem on for its DRANET row, not because its name is a4x."""
    for hw in PROFILES.values():
        assert step_model.program_mnnvl(hw) is (hw.networking is NodeNetworking.DRANET)
