"""The prices `make cost` multiplies, and where each comes from (tools/cost.py).

Every machine a plan runs is priced from a catalogue in SkyPilot's `vms.csv` format
(components/facts/prices.py: the repository's rows of it, or `--catalog` a whole file of your
own), on demand and on Spot; the GKE cluster fee from its page. A prices file (`--prices`, USD per
node-hour) replaces any of them and adds what the catalogue lacks (A4X, flex-start). Its keys are
checked against what the tool prices: every machine type of the targets and the system pool,
`gke-cluster`, and `<machine>:spot` / `<machine>:flex-start` for a GPU machine offered in that
mode. An unknown key is refused with the nearest known one, never silently ignored.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from components.facts.hardware import PROFILES, HardwareProfile
from components.facts.prices import (
    CATALOG_FILE, CATALOGUE, CLUSTER_FEE, CLUSTER_FEE_HOW, CLUSTER_FEE_USD, GKE_PRICING,
    NOT_INCLUDED, READ_ON, REGION, MachinePrice, Mode, machine_price, read_catalog,
)

GPU_MACHINES: dict[str, HardwareProfile] = {hw.machine_type: hw for hw in PROFILES.values()}


class PriceFileError(Exception):
    """A prices file that cannot be used; the message names the file, the key and the fix."""


def machine_types() -> list[str]:
    """What a plan of any target runs: each target's GPU machine and the system pool's."""
    from components.cluster.gke_cluster import SYSTEM_MACHINE_TYPE

    return [*GPU_MACHINES, SYSTEM_MACHINE_TYPE]


def modes(item: str) -> list[Mode]:
    """How `item` can be bought: a GPU machine on demand and, unless its row is reservation-only,
    on Spot and flex-start; every other machine (the system pool) on demand in every mode."""
    hw = GPU_MACHINES.get(item)
    if hw is None or hw.reservation_only:
        return [Mode.ON_DEMAND]
    return list(Mode)


def price_keys(items: Iterable[str]) -> list[str]:
    """Every key a prices file may set: each item's mode keys, and the cluster fee."""
    return [mode.key(item) for item in items for mode in modes(item)] + [CLUSTER_FEE]


@dataclass(frozen=True)
class PriceBook:
    usd: dict[str, float | None]  # price key -> USD per hour (None: no price)
    machines: dict[str, MachinePrice]  # what the catalogue gave for each machine type
    given: dict[str, float]  # what the prices file set
    catalog: Path


def price_book(
    catalog: Path = CATALOG_FILE, given: dict[str, float] | None = None, items: Iterable[str] = ()
) -> PriceBook:
    """The prices of `items` (default: every target's machine and the system pool's) from
    `catalog` and the cluster fee's page, with `given` on top."""
    rows = read_catalog(catalog)
    machines = {}
    for item in dict.fromkeys([*machine_types(), *items]):
        hw = GPU_MACHINES.get(item)
        machines[item] = machine_price(rows, item, (hw.gpu.name, hw.gpus_per_node) if hw else None)
    usd: dict[str, float | None] = {
        mode.key(item): price.usd(mode) for item, price in machines.items() for mode in modes(item)
    }
    usd[CLUSTER_FEE] = CLUSTER_FEE_USD
    return PriceBook({**usd, **(given or {})}, machines, dict(given or {}), catalog)


def read_prices(path: Path, keys: Iterable[str]) -> dict[str, float]:
    """A prices file: one JSON object of price key -> USD per hour, each a number >= 0 and each key
    one of `keys` (`price_keys`)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PriceFileError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(document, dict):
        raise PriceFileError(f'{path}: expected one object like {{"a4x-highgpu-4g": 123.4}}')
    known = list(keys)
    for key, value in document.items():
        if key not in known:
            raise PriceFileError(f"{path}: {_unknown(key, known)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PriceFileError(
                f"{path}: {key} = {value!r} is not a price: give USD per hour as a number >= 0"
            )
    return {key: float(value) for key, value in document.items()}


def _unknown(key: str, known: list[str]) -> str:
    """Why `key` is not a price key, and the fix."""
    item, _, mode = key.partition(":")
    if item in known and mode in {m.value for m in Mode}:
        if mode == Mode.ON_DEMAND.value:
            why = "the on-demand price is the machine's own key"
        elif item in GPU_MACHINES:
            why = (f"{item} is offered only through reservations, which bill at the on-demand "
                   "rate")
        else:
            why = (f"{item} runs on demand in every provisioning mode (the system pool; only the "
                   "GPU pool is spot or flex-start)")
        return f"{key!r} is not an item priced: {why}; give its price as {item!r}"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"unknown item {key!r}: {hint}The items priced: {', '.join(known)} (USD per hour; "
            "a GPU machine's spot and flex-start prices are `<machine>:spot` and "
            "`<machine>:flex-start`)")


def _exact(value: float) -> str:
    """A source's figure as it was read: never rounded, at least to the cent."""
    return f"${value:,.2f}" if round(value, 2) == value else f"${value}"


def sources(book: PriceBook) -> str:
    """Where each price comes from, when it was Google's price, and what the table leaves out."""
    cited = [CATALOGUE, GKE_PRICING]
    custom = book.catalog.resolve() != CATALOG_FILE.resolve()
    origin = f"the catalogue {book.catalog}" if custom else "the catalogue [1]"
    lines = [f"Prices per node-hour in {REGION}, from {origin} and read on {READ_ON} unless a "
             "prices file gave them:", ""]
    for item, price in book.machines.items():
        figures = []
        for mode in modes(item):
            key = mode.key(item)
            usd = price.usd(mode)
            if key in book.given:
                figure = f"{_exact(book.given[key])} from the prices file"
            elif mode is Mode.FLEX_START:
                figure = f"no price (the catalogue has none: give `{key}`)"
            elif usd is None:
                figure = f"no price ({'its row has none' if price.rows and not price.missing else 'not found'})"
            else:
                figure = _exact(usd)
            figures.append(f"{mode.value} {figure}")
        if len(modes(item)) == 1 and GPU_MACHINES.get(item):
            figures.append("offered only through reservations (no spot or flex-start)")
        rows = " + ".join(f"row {row.shown()}" for row in price.rows)
        how = "; ".join(filter(None, [rows, *price.missing]))
        lines.append(f"- `{item}`: {', '.join(figures)}: {how}.")
    fee = (f"{_exact(book.given[CLUSTER_FEE])} (the prices file)" if CLUSTER_FEE in book.given
           else f"{_exact(CLUSTER_FEE_USD)} [2]: {CLUSTER_FEE_HOW}")
    lines += [f"- `{CLUSTER_FEE}`: {fee}.", ""]
    for n, source in enumerate(cited, 1):
        caveat = f" Caveat: {source.caveat}." if source.caveat else ""
        lines.append(f"[{n}] {source.name}. Dated: {source.dated}.{caveat}  ")
    lines += ["", "Not included: " + "; ".join(NOT_INCLUDED) + "."]
    return "\n".join(lines)
