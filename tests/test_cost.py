"""The cost table: node counts from the plan, prices from cited facts, the README equal to both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.facts.hardware import PROFILES, Target
from components.facts.prices import CLUSTER_FEE
from components.runspec.run import GrpoRunConfig
from tools import cost, mockrun, plan, price_book
from tools.stacks import STACK_MODES, STACKS

ROOT = Path(__file__).resolve().parents[1]
PRICES = cost.list_prices()


@pytest.fixture(scope="module")
def costs() -> dict[str, cost.StackCost]:
    return {stack: cost.stack_cost(stack) for stack in STACKS}


def pool(name: str, **inputs) -> mockrun.Registered:
    return mockrun.Registered(
        urn=f"urn:pulumi:s::p::{cost.NODE_POOL}::{name}", type=cost.NODE_POOL, name=name,
        parent=None, custom=True,
        inputs={"nodeConfig": {"machineType": "c2-standard-16"}, **inputs},
    )


def test_readme_and_cost_page_are_the_tools_output():
    """The README's cost table and docs/cost.md's table with sources are exactly what `make
    cost` prints for every stack at the committed prices: a changed default node count, machine
    type or price fails until both are regenerated (`python -m tools.cost --update-readme`)."""
    blocks = (
        ("README.md", cost.README_BLOCK, cost.readme_report()),
        ("docs/cost.md", cost.README_BLOCK, cost.page_report()),
        ("docs/cost.md", cost.RELEASE_BLOCK, cost.release_report()),
    )
    for path, pattern, want in blocks:
        [block] = [m.group(2) for m in pattern.finditer((ROOT / path).read_text())]
        assert block == want, f"{path}: run python -m tools.cost --update-readme"
    assert cost.readme_report() in cost.page_report()


def test_after_the_release_only_a_reservation_keeps_billing_gpu_nodes():
    """Nothing bills for nobody: once a finished run has released the GPUs, a spot or
    flex-start pool is at its floor of 0 GPU nodes, so only the system pool's floor and the
    cluster fee bill; a reservation pool keeps its VMs (the reservation bills them anyway).
    While the run trains, every mode runs all of the target's GPUs."""
    prices = cost.list_prices()
    for found in cost.mode_costs(["a4"]):
        profile = PROFILES[Target.A4]
        assert found.gpus == profile.default_nodes * profile.gpus_per_node, found.provisioning
        gpu_nodes = sum(p.fewest for p in found.pools if p.gpu)
        total, unpriced = found.released(prices)
        assert not unpriced
        if found.provisioning == "reservation":
            assert gpu_nodes == profile.default_nodes
            assert total == found.hourly(prices, at_most=False)[0]
        else:
            assert gpu_nodes == 0, f"{found.provisioning}: GPU nodes bill after the release"
            assert total == pytest.approx(prices[CLUSTER_FEE] + prices["c2-standard-16"])
    assert {c.provisioning for c in cost.mode_costs(["a4"])} == {"reservation", "spot", "flex-start"}
    assert {c.provisioning for c in cost.mode_costs(["a4x"])} == {"reservation"}


def test_nodes_are_counted_from_the_plan(costs):
    """Each stack's default `up` runs its target's default GPU nodes of its machine type and
    1 to 5 system nodes, as the plan registers them: the GPU count is nodes x GPUs per node."""
    for stack, found in costs.items():
        profile = PROFILES[Target(stack)]
        gpu_pool, system_pool = found.pools
        assert (gpu_pool.machine_type, gpu_pool.fewest, gpu_pool.most) == (
            profile.machine_type, profile.default_nodes, profile.default_nodes,
        )
        assert (system_pool.machine_type, system_pool.fewest, system_pool.most) == (
            "c2-standard-16", 1, 5,
        )
        assert found.gpus == profile.default_nodes * profile.gpus_per_node
        assert found.clusters == 1


def test_a_changed_node_count_changes_the_cost():
    """The table follows the config, not a copy of it: four GPU nodes cost four nodes."""
    _, recording = plan.run_program("a4", overrides={"verl-gke:gpuNodes": "4"})
    gpu_pool = next(p for p in cost.pool_sizes(recording) if p.pool == "gpu-pool")
    assert (gpu_pool.fewest, gpu_pool.most) == (4, 4)


def test_per_zone_bounds_are_multiplied_by_the_zones():
    """A pool's min/max_node_count and node_count are per zone (terraform-provider-google):
    a pool over three zones with min 1 max 5 is 3 to 15 nodes; totals are taken as they are;
    a pool that names no zones cannot be counted offline and says so."""
    zones = ["us-central1-a", "us-central1-b", "us-central1-c"]
    recording = mockrun.Recording(resources=[
        pool("per-zone", nodeLocations=zones, autoscaling={"minNodeCount": 1, "maxNodeCount": 5}),
        pool("total", nodeLocations=zones,
             autoscaling={"totalMinNodeCount": 1, "totalMaxNodeCount": 5}),
        pool("fixed", nodeLocations=zones[:2], nodeCount=2),
    ])
    sizes = {p.pool: (p.fewest, p.most) for p in cost.pool_sizes(recording)}
    assert sizes == {"per-zone": (3, 15), "total": (1, 5), "fixed": (4, 4)}
    with pytest.raises(ValueError, match="names no zones"):
        cost.pool_sizes(mockrun.Recording(resources=[pool("regional", nodeCount=1)]))


def test_hourly_cost_is_nodes_times_prices_plus_the_cluster_fee(costs):
    """a4 at its floor: 2 GPU nodes, 1 system node and the cluster fee; at its ceiling 5 system
    nodes. Computed here from the facts, independently of the table's formatting."""
    price = PRICES
    floor = 2 * price["a4-highgpu-8g"] + price["c2-standard-16"] + price[CLUSTER_FEE]
    ceiling = floor + 4 * price["c2-standard-16"]
    assert costs["a4"].hourly(price, at_most=False) == (pytest.approx(floor), [])
    assert costs["a4"].hourly(price, at_most=True) == (pytest.approx(ceiling), [])


def test_a_missing_price_is_shown_missing_never_counted_as_free(costs):
    """A4X has no public list price here: its row gives the priced part and names the unpriced
    nodes, and its per-GPU-hour figure says there is none."""
    prices = cost.list_prices()
    assert prices["a4x-highgpu-4g"] is None
    row = next(line for line in cost.table([costs["a4x"]], prices).splitlines() if "| a4x" in line)
    assert "4 × a4x-highgpu-4g (no price)" in row and "no price |" in row
    _, unpriced = costs["a4x"].hourly(prices, at_most=False)
    assert unpriced == [(4, "a4x-highgpu-4g")]


def test_every_machine_type_any_plan_runs_is_priced_from_the_catalogue():
    """A machine type of any stack or mode is one the price book looks up (and a prices file may
    set), and each is found in the repository's catalogue rows or said not to be: A4X alone has
    no row, so the table can never silently leave a node out."""
    machine_types = set()
    for stack, mode in STACK_MODES:
        _, recording = plan.run_program(stack, mode)
        machine_types |= {p.machine_type for p in cost.pool_sizes(recording)}
    assert machine_types <= set(price_book.machine_types())
    book = price_book.price_book()
    for item in machine_types:
        found = book.machines[item]
        assert (found.rows and not found.missing) or item == "a4x-highgpu-4g", item
        assert bool(found.missing) is (PRICES[item] is None), item


def test_a_prices_file_replaces_the_facts(tmp_path, capsys):
    """`make cost PRICES=file` prices what the facts cannot: with an A4X figure the a4x row
    has a total, and the sources say which figures came from the file."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"a4x-highgpu-4g": 100, "gke-cluster": 0.2}))
    assert cost.main(["--stack", "a4x", "--prices", str(prices)]) == 0
    out = capsys.readouterr().out
    expected = 4 * 100 + PRICES["c2-standard-16"] + 0.2
    assert f"| ${expected:,.2f} |" in out
    assert "`a4x-highgpu-4g`: on-demand $100.00 from the prices file" in out
    assert "`gke-cluster`: $0.20 (the prices file)" in out


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not a readable JSON file"),
        ("[1, 2]", "expected one object"),
        ('{"a4x-highgpu-4g": "cheap"}', "a4x-highgpu-4g = 'cheap' is not a price"),
        ('{"c2-standard-16": -1}', "c2-standard-16 = -1 is not a price"),
        # The reviewer's typo (ECOSYSTEM-REVIEW-4 RE-2): once silently ignored.
        ('{"a4-highgpu-8gg": 38.0}', "unknown item 'a4-highgpu-8gg': did you mean 'a4-highgpu-8g'?"),
        ('{"a4-highgpu-8g:spt": 30}', "did you mean 'a4-highgpu-8g:spot'?"),
        ('{"n2-standard-8": 0.3}', "unknown item 'n2-standard-8'"),
        ('{"a4x-highgpu-4g:spot": 3}', "a4x-highgpu-4g is offered only through reservations"),
        ('{"c2-standard-16:spot": 0.2}', "c2-standard-16 runs on demand in every provisioning mode"),
    ],
)
def test_a_bad_prices_file_is_refused_with_the_key_and_the_fix(tmp_path, capsys, content, message):
    """A prices file that is not an object of non-negative numbers exits 2 with one line that
    names the file, the key and what to give (for a key it does not price, the nearest one), before
    any stack is planned."""
    prices = tmp_path / "prices.json"
    prices.write_text(content)
    cost.stack_cost.cache_clear()
    assert cost.main(["--stack", "a4", "--prices", str(prices)]) == 2
    assert cost.stack_cost.cache_info().currsize == 0  # refused before any plan
    err = capsys.readouterr().err
    assert message in err and str(prices) in err and "Traceback" not in err


def _own_stack(directory: Path, name: str, extra: str = "", base: str = "a4x") -> None:
    """A stack file of the user's own (`Pulumi.<name>.yaml`), as `pulumi stack init` and
    `pulumi config set` would write it: the `base` example's, with `extra` config lines."""
    text = (ROOT / f"Pulumi.{base}.yaml").read_text()
    (directory / f"Pulumi.{name}.yaml").write_text(text.replace("config:\n", "config:\n" + extra, 1))


def test_any_stack_file_is_costed_per_hour_and_per_run(tmp_path, monkeypatch, capsys):
    """`make cost STACK=<own>` costs a stack file of the user's own (not only a4, a3u, a4x),
    from its own config: 8 A4X nodes, not the target's default. One run's cost is the hourly
    cost times set-up (the critical path of its plan) plus training (the step model of its own
    job at its node count), at on-demand prices, and says that spot and flex-start have no
    price source here."""
    from tools import critical_path, step_model

    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    _own_stack(tmp_path, "team-b", "  verl-gke:gpuNodes: 8\n")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"a4x-highgpu-4g": 100}))
    assert cost.main(["--stack", "team-b", "--prices", str(prices)]) == 0
    out = capsys.readouterr().out
    found = cost.stack_cost("team-b")
    assert found.gpus == 8 * 4
    run = found.run
    assert run is not None and "ESTIMATE" in out
    inputs, recording = plan.run_program("team-b")
    assert run.setup_minutes == pytest.approx(critical_path.critical_path(recording)[-1].done_at, abs=0.05)
    row = step_model.run_row(profile := PROFILES[Target.A4X], 8, GrpoRunConfig(), mnnvl=True)
    assert run.gpu_hours == pytest.approx(row["gpu_hours"]) and profile.gpus_per_node == 4
    hourly = 8 * 100 + PRICES["c2-standard-16"] + 0.10
    per_run = hourly * (run.setup_minutes / 60 + run.training_hours)
    assert f"| team-b | reservation | {run.setup_minutes:g} |" in out
    reservation_only = "not offered (a4x-highgpu-4g: reservations only)"
    assert f"| ${per_run:,.2f} | {reservation_only} | {reservation_only} |" in out


def test_a_stack_file_that_does_not_exist_is_named_with_the_fix(tmp_path, monkeypatch, capsys):
    """`make cost STACK=nope` without Pulumi.nope.yaml: exit 2, the file named, and how to
    create it; no traceback."""
    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    assert cost.main(["--stack", "nope"]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.nope.yaml" in err and "pulumi stack init nope" in err and "Traceback" not in err


def test_an_autopilot_stack_of_ones_own_is_costed_without_provisioning_modes(tmp_path, monkeypatch, capsys):
    """A stack file with clusterMode autopilot has no GPU pool and no provisioning mode: it is
    costed once (not refused for a spot or flex-start variant Autopilot cannot have), shown as
    autopilot, its GPUs said not to be counted rather than counted as free."""
    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    _own_stack(tmp_path, "team-ap", "  verl-gke:clusterMode: autopilot\n", base="a4")
    assert cost.main(["--stack", "team-ap"]) == 0
    out = capsys.readouterr().out
    assert "| team-ap | autopilot | 0 | 1 regional cluster |" in out
    assert "no GPU node pool in the plan (Autopilot): not counted" in out


def test_a_reservation_stack_is_costed_in_every_mode(tmp_path, monkeypatch, capsys):
    """The README's own set-up (ECOSYSTEM-REVIEW-4 RE-1): a stack file that names its reservation
    is costed, per hour, per run and after the release in every mode its target is offered in
    (the spot and flex-start variants planned without the reservation), instead of exit 2 on
    "reservation is set but provisioning is 'spot'"."""
    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    cost.stack_cost.cache_clear()  # cached per stack name; another test's `res` is another file
    _own_stack(tmp_path, "res", "  verl-gke:reservation: acme-a4-res\n", base="a4")
    assert cost.main(["--stack", "res"]) == 0
    out = capsys.readouterr().out
    assert "| res | 2 × a4-highgpu-8g + 1–5 × c2-standard-16 + 1 regional cluster | 16 |" in out
    for mode in ("reservation", "spot", "flex-start"):
        assert f"| res | {mode} |" in out, mode
    # Its set-up is the critical path of its own plan (`make critical-path STACK=res`).
    from tools import critical_path

    _, own = plan.run_program("res", "standard")
    assert f"| res | reservation | {round(critical_path.critical_path(own)[-1].done_at, 1):g} |" in out


def test_spot_prices_come_from_the_catalogue_and_a_prices_file_adds_its_own(tmp_path, capsys):
    """One run on spot is priced from the catalogue's Spot column where it has one (a3u: host
    $2.82111 + eight H200 $29.7976 a node-hour), and a prices file carries spot and flex-start
    prices the catalogue lacks (a4's B200 row has no Spot figure in us-central1): the GPU nodes at
    that price, the system pool on demand."""
    book = price_book.price_book()
    assert book.usd["a3-ultragpu-8g:spot"] == pytest.approx(2.82111 + 29.7976)
    assert book.usd["a4-highgpu-8g:spot"] is None and book.usd["a4-highgpu-8g:flex-start"] is None
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"a4-highgpu-8g:spot": 40.0, "a4-highgpu-8g:flex-start": 50.0}))
    assert cost.main(["--stack", "a4", "--prices", str(prices)]) == 0
    out = capsys.readouterr().out
    run = cost.stack_cost("a4").run
    other = PRICES["c2-standard-16"] + PRICES[CLUSTER_FEE]
    per_run = {m: (2 * usd + other) * run.hours for m, usd in (("spot", 40.0), ("flex", 50.0))}
    assert f"| ${per_run['spot']:,.2f} | ${per_run['flex']:,.2f} |" in out
    assert "spot $40.00 from the prices file" in out and "flex-start $50.00 from the prices file" in out


def test_a_catalogue_of_ones_own_replaces_the_repositorys(tmp_path, capsys):
    """`make cost CATALOG=vms.csv` prices from that catalogue (e.g. a newer SkyPilot vms.csv): its
    rows, read by the same rule (host row + GPU row); a file that is not one exits 2 naming it."""
    rows = (ROOT / "components/facts/skypilot-gcp-vms.csv").read_text().replace("90.216,", "80.0,")
    catalog = tmp_path / "vms.csv"
    catalog.write_text(rows)
    assert cost.main(["--stack", "a4", "--catalog", str(catalog)]) == 0
    out = capsys.readouterr().out
    assert "| a4 | 2 × a4-highgpu-8g" in out and "| $10.00 |" in out  # $80 / 8 GPUs
    assert f"from the catalogue {catalog}" in out
    catalog.write_text("name,price\na4,1\n")
    assert cost.main(["--stack", "a4", "--catalog", str(catalog)]) == 2
    err = capsys.readouterr().err
    assert str(catalog) in err and "not the catalogue's header" in err and "Traceback" not in err


def test_each_run_source_line_names_its_stack(capsys):
    """ECOSYSTEM-REVIEW-4 RE-15: with several stacks, each set-up and training source line says
    which stack it belongs to, and the training figure is `make step-model STACK=`'s row."""
    from tools import step_model

    assert cost.main(["--stack", "a4", "--stack", "a3u"]) == 0
    out = capsys.readouterr().out
    sources = out.split("Sources:")[1].split("What still bills")[0]
    lines = [line for line in sources.splitlines() if line.startswith("- ")][:-1]
    assert [line.split(":")[0] for line in lines] == ["- a4", "- a4", "- a3u", "- a3u"]
    row = step_model.stack_row(step_model.stack_config("a3u"))
    assert f"- a3u: training {row['steps']} steps x {row['step']:.1f} s" in sources
