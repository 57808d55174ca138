"""What a default `pulumi up` of each stack costs per hour while it runs, what one run costs
(an estimate), and what still bills once its run has released the GPUs, at list prices.

    python -m tools.cost [--stack a4|<any stack with a Pulumi.<stack>.yaml> ...]
                         [--prices my-prices.json] [--catalog vms.csv]
    python -m tools.cost --update-readme

The node counts come from each stack's offline plan: its node pools' machine types, zones and
autoscaling bounds, exactly as the program registers them. The prices come from a catalogue
(tools/price_book.py: the repository's rows of SkyPilot's GCP catalogue, or `--catalog` a whole
one), and from a JSON file of your own on top ({"a4x-highgpu-4g": 123.4, "a4-highgpu-8g:spot":
40.1, ...}, USD per node-hour; "gke-cluster" for the cluster fee), checked against the items
priced. A machine type without a price is shown as such, never counted as free.
The README's cost table and docs/cost.md (the table with its sources, and what still bills after
a run per provisioning mode) are this tool's output for every stack at the committed prices
(`--update-readme` rewrites them; tests/test_cost.py keeps them equal).

The cost of one run (`run_table`, printed by `make cost`, an ESTIMATE): the stack's hourly cost
(GPU pools at their ceiling, CPU pools at their floor) times the set-up time to the first
training step (tools/critical_path.py's estimate of the stack's plan) plus the training time
(tools/step_model.py's model of the stack's own job at its node count, `make step-model STACK=`'s
row), on demand, on Spot and flex-start where the target offers them and a price exists. Set-up
is counted at the full hourly rate although the GPU nodes join part-way through it: an upper
bound for set-up. Every stack's provisioning modes (what still bills after the release) are
planned with the stack's own config, its reservation dropped for spot and flex-start.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from components.facts.hardware import PROFILES, Target
from components.facts.prices import CATALOG_FILE, CLUSTER_FEE, CatalogError, Mode
from components.schema.choices import Capacity
from tools import mockrun, plan, price_book
from tools.price_book import PriceBook, PriceFileError
from tools.stacks import STACKS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COST_PAGE = ROOT / "docs" / "cost.md"
README_BLOCK = re.compile(r"(<!-- cost-table:[^\n]*-->\n)(.*?)(\n<!-- /cost-table -->)", re.S)
RELEASE_BLOCK = re.compile(r"(<!-- release-table:[^\n]*-->\n)(.*?)(\n<!-- /release-table -->)", re.S)
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
GPUS_PER_NODE = {profile.machine_type: profile.gpus_per_node for profile in PROFILES.values()}
# The GPU mode each provisioning mode buys: a reservation bills "at the same on-demand rate as
# running VMs" (GCP, use reservations).
BOUGHT = {Capacity.RESERVATION: Mode.ON_DEMAND, Capacity.SPOT: Mode.SPOT,
          Capacity.FLEX_START: Mode.FLEX_START}

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
        self, prices: dict[str, float | None], at_most: bool, mode: Mode = Mode.ON_DEMAND
    ) -> tuple[float, list[tuple[int, str]]]:
        """USD per hour of everything priced while the run trains, its GPU nodes bought in
        `mode` (a CPU pool is on demand in every mode), with the other pools at their floor (or
        ceiling), and the items (count, price key) that have no price."""
        return self._priced([
            (pool.running(at_most), mode.key(pool.machine_type) if pool.gpu else pool.machine_type)
            for pool in self.pools
        ], prices)

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
    """Set-up (the critical path of the stack's plan) and training (`make step-model STACK=`'s
    row: the step model of the stack's own job, target and node count); None where the step
    model refuses the job."""
    from tools import critical_path, step_model

    chain = critical_path.critical_path(recording)
    config = step_model.stack_config(stack, inputs)
    row = step_model.stack_row(config)
    if "refused" in row:
        return None
    setup = round(chain[-1].done_at, 1)
    return RunTime(
        setup_minutes=setup,
        setup_source=f"{stack}: set-up {setup:g} min, tools/critical_path.py: the longest chain of "
        "waits of this stack's plan to the first training step (`make critical-path "
        f"STACK={stack}`), most of its durations assumptions",
        training_hours=row["hours"],
        gpu_hours=row["gpu_hours"],
        training_source=f"{stack}: training {row['steps']} steps x {row['step']:.1f} s, "
        f"tools/step_model.py on {config.nodes} x {config.hardware.gpus_per_node} GPUs with this "
        f"stack's job settings, GSM8K's 7,473 prompts and the default model's shape (`make "
        f"step-model STACK={stack}`): datasheet peaks times stated efficiencies, not a measurement",
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
    capacity `provisioning` if given. Spot and flex-start consume no reservation: the stack's own
    is dropped for them (a reservation stack's modes are priced, not refused)."""
    ns = plan.project_name()
    overrides = {f"{ns}:provisioning": provisioning.value} if provisioning else {}
    if provisioning and provisioning is not Capacity.RESERVATION:
        overrides[f"{ns}:reservation"] = ""  # "" is unset (components/schema/config.py load)
    inputs, recording = plan.run_program(stack, overrides=overrides)
    pools = sorted(pool_sizes(recording), key=lambda p: not p.gpu)
    chosen = inputs.config.get(f"{plan.project_name()}:provisioning", Capacity.RESERVATION.value)
    if inputs.config.get(f"{plan.project_name()}:clusterMode") == "autopilot":
        chosen = "autopilot"  # GKE provisions the GPU nodes: no pool, no provisioning mode
    return StackCost(stack, tuple(pools), len(recording.of_type(CLUSTER)), chosen,
                     run_time(stack, inputs, recording))


def list_prices() -> dict[str, float | None]:
    """The committed prices: the repository's catalogue rows and the cluster fee."""
    return price_book.price_book().usd


def _usd(value: float) -> str:
    return f"${value:,.2f}"


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
    for stack in stacks or STACKS:
        target = Target(plan.stack_target(stack))
        default = stack_cost(stack)
        if not default.gpus:  # Autopilot: no GPU pool, and no provisioning mode of its own
            costs.append(default)
            continue
        for mode in Capacity:
            if mode is Capacity.RESERVATION or not PROFILES[target].reservation_only:
                costs.append(default if default.provisioning == mode.value else stack_cost(stack, mode))
    return tuple(costs)


def _per_run(cost: StackCost, prices: dict[str, float | None], mode: Mode) -> str:
    """One run's cost with the GPU nodes bought in `mode`, or why there is none."""
    run = cost.run
    if not cost.gpus:
        return "no GPU node pool in the plan (Autopilot): not counted"
    gpu_pool = next(p for p in cost.pools if p.gpu)
    if mode not in price_book.modes(gpu_pool.machine_type):
        return f"not offered ({gpu_pool.machine_type}: reservations only)"
    total, unpriced = cost.hourly(prices, at_most=False, mode=mode)
    if mode is not Mode.ON_DEMAND and unpriced:
        return f"no price (give `{unpriced[0][1]}` in PRICES)"
    return _priced(total * run.hours, [(n, f"{m} for {run.hours:.1f} h") for n, m in unpriced])


def run_table(costs: Iterable[StackCost], prices: dict[str, float | None]) -> str:
    """ESTIMATE of one run per stack: its hourly cost (GPU pools at their ceiling, CPU pools at
    their floor) over set-up plus training, with the GPU nodes on demand (what a reservation
    bills too), on Spot and flex-start; each source line names its stack."""
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
                         f"job (`make step-model STACK={cost.stack}`) | | |")
            continue
        lines.append(
            f"| {cost.stack} | {cost.provisioning} | {run.setup_minutes:g} | {run.training_hours:.1f} "
            f"| {run.gpu_hours:.0f} | " + " | ".join(_per_run(cost, prices, m) for m in Mode) + " |"
        )
        notes += [run.setup_source, run.training_source]
    lines += [
        "",
        "ESTIMATE, not a quote: per run = the hourly cost above (GPU pools at their ceiling, CPU "
        "pools at their floor, the cluster fee) x (set-up + training). Set-up is counted at the "
        "full rate although the GPU nodes join part-way: an upper bound for it. A reservation "
        "bills at the on-demand rate; the system pool is on demand in every mode.",
        "Sources:",
        *[f"- {note}" for note in notes],
        "- prices: as listed above, per provisioning mode.",
    ]
    return "\n".join(lines)


def report(costs: Iterable[StackCost], book: PriceBook) -> str:
    """The table and its sources: what `make cost` prints and the README holds."""
    return "\n".join([table(costs, book.usd), "", price_book.sources(book)])


@functools.cache
def _default_costs() -> tuple[StackCost, ...]:
    return tuple(stack_cost(stack) for stack in STACKS)


def readme_report() -> str:
    """The README's block: the table of every stack at the committed prices."""
    return table(_default_costs(), list_prices())


def page_report() -> str:
    """docs/cost.md's block: the same table with its sources."""
    return report(_default_costs(), price_book.price_book())


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
                        help=f"a stack (repeatable): any Pulumi.<stack>.yaml; default: {', '.join(STACKS)}")
    parser.add_argument("--prices", type=Path,
                        help='JSON file of item -> USD per hour ("<machine>:spot" and ":flex-start" too)')
    parser.add_argument("--catalog", type=Path, default=CATALOG_FILE,
                        help="a price catalogue in SkyPilot's vms.csv format; default: the repository's rows")
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite the cost tables of README.md and docs/cost.md (every stack, committed prices)")
    args = parser.parse_args(argv)
    try:
        if args.update_readme:
            update_readme()
            return 0
        # The file is checked before any stack is planned: a typo costs no plan.
        given = (price_book.read_prices(args.prices, price_book.price_keys(price_book.machine_types()))
                 if args.prices else {})
        stacks = args.stack or list(STACKS)
        costs = [stack_cost(stack) for stack in stacks]
        modes = mode_costs(stacks)
        items = {pool.machine_type for cost in costs for pool in cost.pools}
        book = price_book.price_book(args.catalog, given, sorted(items))
    except (PriceFileError, CatalogError, plan.StackFileError, ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report(costs, book))
    print("\nWhat one run costs (an ESTIMATE):\n")
    print(run_table(costs, book.usd))
    print("\nWhat still bills once a finished run has released the GPUs:\n")
    print(release_table(modes, book.usd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
