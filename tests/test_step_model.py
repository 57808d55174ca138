"""The step model (tools/step_model.py): an estimate that justifies the defaults. Its invariants,
not its numbers: every default it prints is one the program accepts, and the differences it is
cited for point the way the docs say."""

from __future__ import annotations

import pytest

from components.facts.hardware import Target, profile
from components.runspec.run import GrpoRunConfig
from tools import step_model


def test_the_report_says_it_is_an_estimate_and_covers_every_stack():
    """Each stack at 2, 8 and 32 nodes (A4X: up to its 18), the default count included."""
    text = step_model.report(["a4", "a3u", "a4x"], step_model.NODE_COUNTS)
    assert text.startswith("ESTIMATE")
    for stack, counts in (("a4", (2, 8, 32)), ("a3u", (2, 8, 32)), ("a4x", (2, 4, 8, 18))):
        for nodes in counts:
            assert any(line.split()[:2] == [stack, str(nodes)] and " default " in line
                       for line in text.splitlines()), (stack, nodes)
    defaults = [line for line in text.splitlines() if " default " in line]
    assert defaults and not any("refused" in line for line in defaults)


@pytest.mark.parametrize("target", [t.value for t in Target])
def test_the_defaults_execute_a_step_no_slower_than_the_tutorials_settings_on_its_cluster(target):
    """On the tutorial's own cluster, with the same KL setting (the defaults' KL loss is a
    training choice that costs one reference pass), the derived defaults' execution settings
    (larger log-prob micro batches, a smaller rollout TP; on A4X, MNNVL and micro 32) model a
    step no longer than the tutorial's and less time in collectives, and a shorter step on A4X.
    At the pinned verl's max_num_seqs (1024) the tutorial's TP 8 replicas also decode their
    sequences in one wave, so on a4/a3u the rollouts model alike."""
    hw = profile(target)
    mnnvl = step_model.program_mnnvl(hw)
    tutorial = step_model.tutorial(hw)
    ours = GrpoRunConfig().model_copy(update={"use_kl_loss": tutorial.use_kl_loss})
    mine = step_model.run_row(hw, hw.default_nodes, ours, mnnvl)
    theirs = step_model.run_row(hw, hw.default_nodes, tutorial, False)
    assert mine["step"] <= theirs["step"] and mine["collectives"] < theirs["collectives"]
    if mnnvl:
        assert mine["step"] < theirs["step"]


def test_mnnvl_speeds_up_a4x_collectives_by_nvlink_over_the_nodes_nics():
    """The reason for NCCL_CUMEM_ENABLE=1 on A4X (review finding 3): with verl's 0 the FSDP
    collectives of the default run cross nodes over the four RDMA NICs (4 x 50 GB/s per rank,
    expectations.network_busbw_bound_gbs), with 1 over NVLink (900 GB/s): 4.5 times faster."""
    hw = profile("a4x")
    on = step_model.run_row(hw, 4, GrpoRunConfig(), True)
    off = step_model.run_row(hw, 4, GrpoRunConfig(), False)
    assert off["collectives"] == pytest.approx(4.5 * on["collectives"], rel=0.05)


def test_cross_node_collectives_run_at_the_nodes_nics_not_one_nics_rate():
    """A ring over two a4 nodes moves a rank's share at 8 NICs x 50 GB/s (one NCCL channel per
    NIC), not one NIC's 50 GB/s: Cluster Toolkit measured 366 GB/s of busbw on two A4 nodes.
    The model's cross-node rate is that bound times its collective efficiency."""
    hw = profile("a4")
    assert step_model._link_gbs(hw, 16, False) == pytest.approx(
        400 * step_model.COLLECTIVE_EFFICIENCY
    )
    assert step_model._link_gbs(hw, 8, False) == pytest.approx(
        hw.gpu.nvlink_gbs * step_model.COLLECTIVE_EFFICIENCY
    )


def test_samples_per_gpu_stay_above_the_floor_as_the_cluster_grows():
    """At 32 a4 nodes the tutorial's fixed batch would leave 8 samples per GPU; the default
    keeps at least 64, so the per-micro-batch all-gather does not dominate the step."""
    row = step_model.run_row(profile("a4"), 32, GrpoRunConfig(), False)
    s = row["settings"]
    assert s.train_batch * s.rollout_n // 256 >= 64


def _own_stack(directory, name: str, base: str, extra: str = "") -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / f"Pulumi.{base}.yaml").read_text()
    (directory / f"Pulumi.{name}.yaml").write_text(text.replace("config:\n", "config:\n" + extra, 1))


def test_any_stack_file_is_modelled_on_its_target_and_a_missing_one_is_named(tmp_path, monkeypatch, capsys):
    """`make step-model STACK=<own>` models a stack file of the user's own on the target it
    sets (its rows are A4X's: 4 GPUs a node); a stack without a file exits 2 naming the file
    and the fix, without a traceback."""
    from tools import cli, plan

    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    _own_stack(tmp_path, "team-b", "a4x")
    assert cli.run(step_model.main, ["--stack", "team-b", "--nodes", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("team-b")]
    assert rows and all(int(row[2]) == int(row[1]) * 4 for row in rows)
    assert cli.run(step_model.main, ["--stack", "nope"]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.nope.yaml" in err and "pulumi stack init nope" in err and "Traceback" not in err


def test_a_stack_is_modelled_with_its_own_job_and_node_count_as_make_cost_does(tmp_path, monkeypatch, capsys):
    """ECOSYSTEM-REVIEW-4 RE-3: `make step-model STACK=res NODES=4` on a stack with
    `job: {totalEpochs: 1, rolloutN: 16}` models that job at 4 nodes only (not the defaults, no
    2-node row it was not asked for), and without NODES at the stack's own count: the GPU-hours
    `make cost STACK=res` multiplies."""
    from tools import cli, cost, plan

    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    _own_stack(tmp_path, "res", "a4", "  verl-gke:gpuNodes: 4\n  verl-gke:job:\n"
               "    totalEpochs: 1\n    rolloutN: 16\n")
    assert cli.run(step_model.main, ["--stack", "res", "--nodes", "4"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("res ")]
    config = step_model.stack_config("res")
    assert (config.nodes, config.run.total_epochs, config.run.rollout_n) == (4, 1, 16)
    job = step_model.stack_row(config)
    default = step_model.run_row(profile("a4"), 4, GrpoRunConfig(), False)
    assert job["steps"] == default["steps"] // 2  # one epoch, not two
    assert [row[:4] for row in rows] == [["res", "4", "32", "stack"]]
    assert float(rows[0][-1]) == pytest.approx(job["gpu_hours"], abs=0.05)
    assert cli.run(step_model.main, ["--stack", "res"]) == 0  # its own node count
    [own] = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("res ")]
    assert own[1] == "4"
    cost.stack_cost.cache_clear()  # cached per stack name; another test's `res` is another file
    assert cost.stack_cost("res").run.gpu_hours == pytest.approx(job["gpu_hours"])


def test_a_refused_job_is_printed_with_its_whole_reason():
    """ECOSYSTEM-REVIEW-4 RE-4: a job verl would refuse (the tutorial's micro batch of 64 on
    8 a4 nodes) is shown with the whole reason, its fix included, not cut at 110 characters."""
    from components.runspec.run import resolve_run

    hw = profile("a4")
    run = step_model.tutorial(hw).with_model(step_model.DEFAULT_MODEL)
    [reason, *_] = resolve_run(run, hw, 8).problems
    text = step_model.report(["a4"], (8,))
    assert len(reason) > 110 and reason.endswith("use 1, 2, 4, 8, 16 or 32")
    assert f"a4        8   64 tutorial  refused: {reason}\n" in text
