"""What a default `pulumi up` of each stack costs per hour while it runs, at list prices.

    python -m tools.cost [--stack a4 ...] [--prices my-prices.json]
    python -m tools.cost --update-readme

The node counts come from each stack's offline plan: its node pools' machine types, zones and
autoscaling bounds, exactly as the program registers them. The prices come from
components/facts/prices.py, or from a JSON file of your own ({"a4x-highgpu-4g": 123.4, ...}, USD
per node-hour; "gke-cluster" for the cluster fee), e.g. read from your billing account's
Cloud Billing Catalog. A machine type without a price is shown as such, never counted as free.
The README's cost table and docs/cost.md (the table with its sources) are this tool's output for
every stack at the committed prices (`--update-readme` rewrites both; tests/test_cost.py keeps
them equal).
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
from components.facts.prices import (
    CLUSTER_FEE, LIST_PRICES, NOT_INCLUDED, READ_ON, REGION, Source,
)
from tools import mockrun, plan

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COST_PAGE = ROOT / "docs" / "cost.md"
README_BLOCK = re.compile(r"(<!-- cost-table:[^\n]*-->\n)(.*?)(\n<!-- /cost-table -->)", re.S)
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


@dataclass(frozen=True)
class StackCost:
    stack: str
    pools: tuple[PoolSize, ...]  # GPU pools first
    clusters: int

    @property
    def gpus(self) -> int:
        return sum(GPUS_PER_NODE.get(p.machine_type, 0) * p.fewest for p in self.pools)

    def hourly(
        self, prices: dict[str, float | None], at_most: bool
    ) -> tuple[float, list[tuple[int, str]]]:
        """USD per hour of everything priced, at the pools' floor (or ceiling), and the items
        (count, name) that have no price."""
        counts = [(self.clusters, CLUSTER_FEE)] + [
            (pool.most if at_most else pool.fewest, pool.machine_type) for pool in self.pools
        ]
        total, unpriced = 0.0, []
        for count, item in counts:
            price = prices.get(item)
            if price is None:
                unpriced.append((count, item))
            else:
                total += price * count
        return total, unpriced


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


def stack_cost(stack: str) -> StackCost:
    """The default `pulumi up` of `stack`: its stack file and the config's defaults."""
    _, recording = plan.run_program(stack)
    pools = sorted(pool_sizes(recording), key=lambda p: p.machine_type not in GPUS_PER_NODE)
    return StackCost(stack, tuple(pools), len(recording.of_type(CLUSTER)))


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
    count = str(pool.fewest) if pool.fewest == pool.most else f"{pool.fewest}–{pool.most}"
    return f"{count} × {pool.machine_type}"


def _cost(cost: StackCost, prices: dict[str, float | None], at_most: bool) -> str:
    total, unpriced = cost.hourly(prices, at_most)
    missing = "".join(f" + {count} × {machine} (no price)" for count, machine in unpriced)
    return _usd(total) + missing


def _per_gpu_hour(cost: StackCost, prices: dict[str, float | None]) -> str:
    gpu_pool = next((p for p in cost.pools if p.machine_type in GPUS_PER_NODE), None)
    price = prices.get(gpu_pool.machine_type) if gpu_pool else None
    return "no price" if price is None else _usd(price / GPUS_PER_NODE[gpu_pool.machine_type])


def table(costs: Iterable[StackCost], prices: dict[str, float | None]) -> str:
    """The Markdown cost table: one row per stack."""
    lines = [
        "| stack | nodes while it runs | GPUs | per GPU-hour | per hour, pools at their floor "
        "| per hour, pools at their ceiling |",
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


def update_readme() -> None:
    """Rewrite the cost-table block of the README (the table) and of docs/cost.md (with sources)."""
    for path, block in ((README, readme_report()), (COST_PAGE, page_report())):
        text = path.read_text(encoding="utf-8")
        if not README_BLOCK.search(text):
            raise ValueError(f"{path}: no <!-- cost-table: ... --> block to rewrite")
        path.write_text(README_BLOCK.sub(lambda m: m.group(1) + block + m.group(3), text), "utf-8")


def main(argv: list[str] | None = None) -> int:
    from components.schema.config import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", choices=[t.value for t in Target])
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
        costs = [stack_cost(stack) for stack in args.stack or [t.value for t in Target]]
    except (PriceFileError, plan.StackFileError, ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    prices.update(given)
    print(report(costs, prices, given))
    return 0


if __name__ == "__main__":
    sys.exit(main())
