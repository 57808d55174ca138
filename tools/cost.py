"""What a default `pulumi up` of each stack costs per hour while it runs, what one run costs
(an estimate), and what still bills once its run has released the GPUs, at list prices.

    python -m tools.cost [--stack a4|<any stack with a Pulumi.<stack>.yaml> ...] [--prices my-prices.json]
    python -m tools.cost --update-readme

The node counts come from each stack's offline plan: its node pools' machine types, zones and
autoscaling bounds, exactly as the program registers them. The prices come from
components/facts/prices.py, or from a JSON file of your own ({"a4x-highgpu-4g": 123.4, ...}, USD
per node-hour; "gke-cluster" for the cluster fee), e.g. read from your billing account's
Cloud Billing Catalog. A machine type without a price is shown as such, never counted as free.
The README's cost table and docs/cost.md (the table with its sources, and what still bills after
a run per provisioning mode) are this tool's output for every stack at the committed prices
(`--update-readme` rewrites them; tests/test_cost.py keeps them equal).

The cost of one run (`run_table`, printed by `make cost`, an ESTIMATE): the stack's hourly cost
(GPU pools at their ceiling, CPU pools at their floor) times the set-up time to the first
training step (tools/critical_path.py's estimate of the stack's plan) plus the training time
(tools/step_model.py's model of the stack's own job at its node count). Set-up is counted at the
full hourly rate although the GPU nodes join part-way through it: an upper bound for set-up.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from components.facts.hardware import PROFILES, Target
from components.schema.choices import Capacity
from components.facts.prices import (
    CLUSTER_FEE, LIST_PRICES, NOT_INCLUDED, READ_ON, REGION, Source,
)
from tools import mockrun, plan

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COST_PAGE = ROOT / "docs" / "cost.md"
README_BLOCK = re.compile(r"(<!-- cost-table:[^\n]*-->\n)(.*?)(\n<!-- /cost-table -->)", re.S)
RELEASE_BLOCK = re.compile(r"(<!-- release-table:[^\n]*-->\n)(.*?)(\n<!-- /release-table -->)", re.S)
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
GPUS_PER_NODE = {profile.machine_type: profile.gpus_per_node for profile in PROFILES.values()}


class PriceFileError(Exception):
    """A prices file that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class PoolSize:
    pool: str
    machine_type: str
    fewest: int  # nodes while nothing asks for more (the autoscaler's floor)
    most: int  # nodes at the autoscaler's ceiling

    @property
    def gpu(self) -> bool:
        return self.machine_type in GPUS_PER_NODE

    def running(self, at_most: bool) -> int:
        """Nodes while a run trains: a GPU pool at its ceiling (the RayCluster has one worker
        per node, and a spot or flex-start pool's floor of 0 is what it shrinks to after the
        release), any other pool at its floor or ceiling."""
        return self.most if self.gpu or at_most else self.fewest


@dataclass(frozen=True)
class StackCost:
    stack: str
    pools: tuple[PoolSize, ...]  # GPU pools first
    clusters: int
    provisioning: str = Capacity.RESERVATION.value
    run: "RunTime | None" = None  # how long one run takes, where it could be modelled

    @property
    def gpus(self) -> int:
        return sum(GPUS_PER_NODE.get(p.machine_type, 0) * p.running(False) for p in self.pools)

    def hourly(
        self, prices: dict[str, float | None], at_most: bool
    ) -> tuple[float, list[tuple[int, str]]]:
        """USD per hour of everything priced while the run trains, with the other pools at
        their floor (or ceiling), and the items (count, name) that have no price."""
        return self._priced([(pool.running(at_most), pool.machine_type) for pool in self.pools], prices)

    def released(self, prices: dict[str, float | None]) -> tuple[float, list[tuple[int, str]]]:
        """USD per hour once the run has released the GPUs and nothing else runs: every pool
        at its floor (the autoscaler removes empty nodes down to it), and the cluster fee."""
        return self._priced([(pool.fewest, pool.machine_type) for pool in self.pools], prices)

    def _priced(
        self, pools: list[tuple[int, str]], prices: dict[str, float | None]
    ) -> tuple[float, list[tuple[int, str]]]:
        counts = [(self.clusters, CLUSTER_FEE)] + [(count, item) for count, item in pools if count]
        total, unpriced = 0.0, []
        for count, item in counts:
            price = prices.get(item)
            if price is None:
                unpriced.append((count, item))
            else:
                total += price * count
        return total, unpriced


@dataclass(frozen=True)
class RunTime:
    """How long one run of a stack keeps its nodes, each figure with where it comes from."""

    setup_minutes: float  # `pulumi up` to the first training step
    setup_source: str
    training_hours: float  # wall-clock hours of training
    gpu_hours: float
    training_source: str

    @property
    def hours(self) -> float:
        return self.setup_minutes / 60 + self.training_hours


def run_time(stack: str, inputs: plan.StackInputs, recording: mockrun.Recording) -> RunTime | None:
    """Set-up (the critical path of the stack's plan) and training (the step model of the stack's
    own job, target and node count); None where the step model refuses the job."""
    from components.schema import config as stack_config
    from tools import critical_path, step_model

    chain = critical_path.critical_path(recording)
    config = stack_config.load(inputs.config, inputs.secret_keys, stack, plan.project_name())
    hw = config.hardware
    # A4X's default runs FSDP over multi-node NVLink (step_model's "default" row).
    row = step_model.run_row(hw, config.nodes, config.run, mnnvl=step_model.program_mnnvl(hw))
    if "refused" in row:
        return None
    return RunTime(
        setup_minutes=round(chain[-1].done_at, 1),
        setup_source="tools/critical_path.py: the longest chain of waits of this stack's plan "
        "to the first training step (`make critical-path`), most of its durations assumptions",
        training_hours=row["hours"],
        gpu_hours=row["gpu_hours"],
        training_source=f"tools/step_model.py: {row['steps']} steps x {row['step']:.1f} s modelled "
        f"on {config.nodes} x {hw.gpus_per_node} GPUs with this stack's job settings, "
        "GSM8K's 7,473 prompts and the default model's shape (`make step-model`): datasheet "
        "peaks times stated efficiencies, not a measurement",
    )


def pool_sizes(recording: mockrun.Recording) -> tuple[PoolSize, ...]:
    """Every node pool's machine type and node count range, as GKE would count them: per-zone
    bounds (min/max_node_count, node_count) times the pool's zones, totals as they are."""
    sizes = []
    for pool in recording.of_type(NODE_POOL):
        inputs = pool.plain_inputs
        zones = len(inputs.get("nodeLocations") or [])
        if not zones:
            # The pool would take the cluster's zones, which GKE picks: not countable offline.
            raise ValueError(f"node pool {pool.name} names no zones (nodeLocations)")
        bounds = inputs.get("autoscaling") or {}
        if "totalMinNodeCount" in bounds:
            fewest, most = bounds["totalMinNodeCount"], bounds["totalMaxNodeCount"]
        elif "minNodeCount" in bounds:
            fewest, most = bounds["minNodeCount"] * zones, bounds["maxNodeCount"] * zones
        else:
            fewest = most = inputs.get("nodeCount", inputs.get("initialNodeCount", 0)) * zones
        sizes.append(PoolSize(pool.name, inputs["nodeConfig"]["machineType"], fewest, most))
    return tuple(sizes)


@functools.cache
def stack_cost(stack: str, provisioning: Capacity | None = None) -> StackCost:
    """The default `pulumi up` of `stack`: its stack file and the config's defaults, with the GPU
    capacity `provisioning` if given."""
    overrides = {f"{plan.project_name()}:provisioning": provisioning.value} if provisioning else {}
    inputs, recording = plan.run_program(stack, overrides=overrides)
    pools = sorted(pool_sizes(recording), key=lambda p: not p.gpu)
    chosen = inputs.config.get(f"{plan.project_name()}:provisioning", Capacity.RESERVATION.value)
    if inputs.config.get(f"{plan.project_name()}:clusterMode") == "autopilot":
        chosen = "autopilot"  # GKE provisions the GPU nodes: no pool, no provisioning mode
    return StackCost(stack, tuple(pools), len(recording.of_type(CLUSTER)), chosen,
                     run_time(stack, inputs, recording))


def list_prices() -> dict[str, float | None]:
    return {item: price.usd_per_hour for item, price in LIST_PRICES.items()}


def read_prices(path: Path) -> dict[str, float]:
    """A prices file: one JSON object of item -> USD per hour, each a number >= 0."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PriceFileError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(document, dict):
        raise PriceFileError(f'{path}: expected one object like {{"a4x-highgpu-4g": 123.4}}')
    for item, value in document.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PriceFileError(
                f"{path}: {item} = {value!r} is not a price: give USD per hour as a number >= 0"
            )
    return {item: float(value) for item, value in document.items()}


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _exact(value: float) -> str:
    """A source's figure as it was read: never rounded, at least to the cent."""
    return _usd(value) if round(value, 2) == value else f"${value}"


def _nodes(pool: PoolSize) -> str:
    low = pool.running(False)
    count = str(low) if low == pool.most else f"{low}–{pool.most}"
    return f"{count} × {pool.machine_type}"


def _cost(cost: StackCost, prices: dict[str, float | None], at_most: bool) -> str:
    return _priced(*cost.hourly(prices, at_most))


def _priced(total: float, unpriced: list[tuple[int, str]]) -> str:
    missing = "".join(f" + {count} × {machine} (no price)" for count, machine in unpriced)
    return _usd(total) + missing


def _per_gpu_hour(cost: StackCost, prices: dict[str, float | None]) -> str:
    gpu_pool = next((p for p in cost.pools if p.machine_type in GPUS_PER_NODE), None)
    price = prices.get(gpu_pool.machine_type) if gpu_pool else None
    return "no price" if price is None else _usd(price / GPUS_PER_NODE[gpu_pool.machine_type])


def table(costs: Iterable[StackCost], prices: dict[str, float | None]) -> str:
    """The Markdown cost table: one row per stack."""
    lines = [
        "| stack | nodes while it runs | GPUs | per GPU-hour | per hour, CPU pools at their floor "
        "| per hour, CPU pools at their ceiling |",
        "|---|---|---|---|---|---|",
    ]
    for cost in costs:
        nodes = " + ".join(_nodes(p) for p in cost.pools)
        lines.append(
            f"| {cost.stack} | {nodes} + {cost.clusters} regional cluster | {cost.gpus} "
            f"| {_per_gpu_hour(cost, prices)} | {_cost(cost, prices, at_most=False)} "
            f"| {_cost(cost, prices, at_most=True)} |"
        )
    return "\n".join(lines)


def release_table(costs: Iterable[StackCost], prices: dict[str, float | None]) -> str:
    """What still bills once a finished run has released the GPUs: one row per stack and
    provisioning mode, every pool at its floor."""
    lines = [
        "| stack | provisioning | GPU nodes after the release | what still bills | per hour after the release |",
        "|---|---|---|---|---|",
    ]
    for cost in costs:
        gpu_nodes = sum(p.fewest for p in cost.pools if p.gpu)
        billed = [f"{p.fewest} × {p.machine_type}" for p in cost.pools if p.fewest]
        why = " (the reservation bills its VMs anyway)" if cost.provisioning == Capacity.RESERVATION.value else ""
        lines.append(
            f"| {cost.stack} | {cost.provisioning} | {gpu_nodes}{why} "
            f"| {' + '.join([*billed, f'{cost.clusters} regional cluster'])} "
            f"| {_priced(*cost.released(prices))} |"
        )
    return "\n".join(lines)


def mode_costs(stacks: Iterable[str] | None = None) -> tuple[StackCost, ...]:
    """Each stack's default run (every target's stack by default) under each provisioning mode
    its target (the stack file's `<project>:target`) is offered in."""
    costs = []
    for stack in stacks or [t.value for t in Target]:
        target = Target(plan.stack_target(stack))
        default = stack_cost(stack)
        if not default.gpus:  # Autopilot: no GPU pool, and no provisioning mode of its own
            costs.append(default)
            continue
        for mode in Capacity:
            if mode is Capacity.RESERVATION or not PROFILES[target].reservation_only:
                costs.append(default if default.provisioning == mode.value else stack_cost(stack, mode))
    return tuple(costs)


# Where a price for each provisioning mode comes from: components/facts/prices.py has on-demand
# list prices only (NOT_INCLUDED: "Spot or flex-start prices"), so those columns say so.
NO_DISCOUNT_SOURCE = "no price source in this repository (components/facts/prices.py has on-demand list prices only)"


def run_table(costs: Iterable[StackCost], prices: dict[str, float | None]) -> str:
    """ESTIMATE of one run per stack: its hourly cost (GPU pools at their ceiling, CPU pools at
    their floor) over set-up plus training, at on-demand prices; spot and flex-start say that
    no price source exists here."""
    lines = [
        "| stack | provisioning | set-up, min | training, h | GPU-hours | per run, on-demand "
        "| per run, spot | per run, flex-start |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    for cost in costs:
        run = cost.run
        if run is None:
            lines.append(f"| {cost.stack} | {cost.provisioning} | | | | the step model refuses this "
                         "job (`make step-model`) | | |")
            continue
        if not cost.gpus:
            on_demand = "no GPU node pool in the plan (Autopilot): not counted"
        else:
            total, unpriced = cost.hourly(prices, at_most=False)
            on_demand = _priced(total * run.hours, [(n, f"{m} for {run.hours:.1f} h") for n, m in unpriced])
        lines.append(
            f"| {cost.stack} | {cost.provisioning} | {run.setup_minutes:g} | {run.training_hours:.1f} "
            f"| {run.gpu_hours:.0f} | {on_demand} | no price source | no price source |"
        )
        for note in (run.setup_source, run.training_source):
            if note not in notes:
                notes.append(note)
    lines += [
        "",
        "ESTIMATE, not a quote: per run = the hourly cost above (GPU pools at their ceiling, CPU "
        "pools at their floor, the cluster fee) x (set-up + training). Set-up is counted at the "
        "full rate although the GPU nodes join part-way: an upper bound for it.",
        "Sources:",
        *[f"- set-up: {n}" if n.startswith("tools/critical") else f"- training: {n}" for n in notes],
        "- prices: on-demand list prices, as listed above.",
        f"- spot, flex-start: {NO_DISCOUNT_SOURCE}.",
    ]
    return "\n".join(lines)


def sources(prices: dict[str, float | None], given: Iterable[str] = ()) -> str:
    """Where each price comes from, when it was Google's price, and what the table leaves out."""
    given = set(given)
    cited: list[Source] = []
    lines = [f"On-demand list prices in {REGION}, read on {READ_ON}:", ""]
    for item in [*LIST_PRICES, *sorted(given - LIST_PRICES.keys())]:
        if item in given:
            lines.append(f"- `{item}`: {_exact(prices[item] or 0.0)}, from the prices file given")
            continue
        fact = LIST_PRICES[item]
        if fact.source not in cited:
            cited.append(fact.source)
        figure = "no price found" if fact.usd_per_hour is None else _exact(fact.usd_per_hour)
        lines.append(f"- `{item}`: {figure} [{cited.index(fact.source) + 1}]: {fact.how}.")
    lines.append("")
    for n, source in enumerate(cited, 1):
        caveat = f" Caveat: {source.caveat}." if source.caveat else ""
        lines.append(f"[{n}] {source.name}. Dated: {source.dated}.{caveat}  ")
    lines += ["", "Not included: " + "; ".join(NOT_INCLUDED) + "."]
    return "\n".join(lines)


def report(
    costs: Iterable[StackCost], prices: dict[str, float | None], given: Iterable[str] = ()
) -> str:
    """The table and its sources: what `make cost` prints and the README holds."""
    return "\n".join([table(costs, prices), "", sources(prices, given)])


@functools.cache
def _default_costs() -> tuple[StackCost, ...]:
    return tuple(stack_cost(t.value) for t in Target)


def readme_report() -> str:
    """The README's block: the table of every stack at the committed prices."""
    return table(_default_costs(), list_prices())


def page_report() -> str:
    """docs/cost.md's block: the same table with its sources."""
    return report(_default_costs(), list_prices())


def release_report() -> str:
    """docs/cost.md's second block: what still bills after a run, per provisioning mode."""
    return release_table(mode_costs(), list_prices())


def update_readme() -> None:
    """Rewrite the cost-table block of the README (the table) and of docs/cost.md (with sources),
    and docs/cost.md's release-table block."""
    blocks = (
        (README, README_BLOCK, readme_report()),
        (COST_PAGE, README_BLOCK, page_report()),
        (COST_PAGE, RELEASE_BLOCK, release_report()),
    )
    for path, pattern, block in blocks:
        text = path.read_text(encoding="utf-8")
        if not pattern.search(text):
            raise ValueError(f"{path}: no {pattern.pattern[:22]}... block to rewrite")
        path.write_text(pattern.sub(lambda m: m.group(1) + block + m.group(3), text), "utf-8")


def main(argv: list[str] | None = None) -> int:
    from components.schema.config import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append",
                        help="a stack (repeatable): any Pulumi.<stack>.yaml; default: a4, a3u, a4x")
    parser.add_argument("--prices", type=Path, help="JSON file of item -> USD per hour")
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite the cost tables of README.md and docs/cost.md (every stack, committed prices)")
    args = parser.parse_args(argv)
    prices = list_prices()
    given: dict[str, float] = {}
    try:
        if args.update_readme:
            update_readme()
            return 0
        if args.prices:
            given = read_prices(args.prices)
        stacks = args.stack or [t.value for t in Target]
        costs = [stack_cost(stack) for stack in stacks]
        modes = mode_costs(stacks)
    except (PriceFileError, plan.StackFileError, ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    prices.update(given)
    print(report(costs, prices, given))
    print("\nWhat one run costs (an ESTIMATE):\n")
    print(run_table(costs, prices))
    print("\nWhat still bills once a finished run has released the GPUs:\n")
    print(release_table(modes, prices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
