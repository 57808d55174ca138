"""Public prices of what a `pulumi up` runs, for tools/cost.py: read from a price catalogue.

The program never reads these: they are facts for tools/cost.py, which multiplies them by the
node pools of each stack's offline plan. A machine's on-demand and Spot prices are read from
CATALOG_FILE, rows copied verbatim from SkyPilot's GCP catalogue (CATALOGUE, generated from
Google's Cloud Billing Catalog API, the public list prices), never typed in by hand: to update
them, replace the file's rows with those of a newer `catalogs/v7/gcp/vms.csv` (same header), or
give tools/cost.py a whole catalogue (`make cost CATALOG=vms.csv`). A machine is priced as the
catalogue prices it: its host row (vCPUs and memory) plus the row of its GPUs (the hardware row's
GPU and count); a price the catalogue does not have is None, said so, never a guess. The GKE
cluster fee is not in the catalogue and is the one figure written here, with its page. Prices
change and differ by region and contract: re-read them before budgeting, or give tools/cost.py
your own (`make cost PRICES=my-prices.json`, docs/cost.md).
"""

from __future__ import annotations

import csv
import enum
from dataclasses import dataclass
from pathlib import Path

REGION = "us-central1"  # the stack files' example region; list prices differ by region
READ_ON = "2026-11-30"  # the day the sources below were read
CLUSTER_FEE = "gke-cluster"  # the item name of the cluster management fee
CATALOG_FILE = Path(__file__).with_name("skypilot-gcp-vms.csv")
# The catalogue's columns (skypilot-catalog catalogs/v7/gcp/vms.csv, its first line).
CATALOG_HEADER = (
    "InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount", "GpuInfo",
    "Region", "AvailabilityZone", "Price", "SpotPrice",
)


class Mode(str, enum.Enum):
    """How a GPU node is bought: the price key of a mode other than on-demand is
    `<machine type>:<mode>` (tools/cost.py, a prices file)."""

    ON_DEMAND = "on-demand"  # also what a reservation bills, at "the same on-demand rate"
    SPOT = "spot"
    FLEX_START = "flex-start"

    def key(self, item: str) -> str:
        return item if self is Mode.ON_DEMAND else f"{item}:{self.value}"


@dataclass(frozen=True)
class Source:
    name: str
    dated: str  # when its figures were Google's list prices, and how that is known
    caveat: str = ""


CATALOGUE = Source(
    "skypilot-org/skypilot-catalog `catalogs/v7/gcp/vms.csv` at commit 017e2502fb63, generated "
    "from the Cloud Billing Catalog API by skypilot `sky/catalog/data_fetchers/fetch_gcp.py`; "
    f"its rows used here are components/facts/{CATALOG_FILE.name}",
    # The file carries no date. Cyclenerd/google-cloud-pricing-cost-calculator's weekly exports
    # of the same API (`pricing.yml`) show c2-standard-16 Spot in us-central1 at $0.246624 up to
    # 2025-08-14, $0.258912 from 2025-08-30 to 2025-09-18 and $0.271872 from 2025-09-25.
    "2025-08-15 to 2025-09-24, inferred: the file has no date, but its c2-standard-16 Spot "
    "price in us-central1, $0.25891, is the one Cyclenerd/google-cloud-pricing-cost-calculator's "
    "weekly exports of the same API show only then",
    "not all its GPU rows are right (it takes the first SKU whose description names the GPU, "
    "fetch_gcp.py get_gpu_price): for a3-highgpu-8g in us-central1 it gives $43.07 (host "
    "$9.46006 + eight H100 $33.60609) where Cyclenerd's export gives $88.49. Its H200 and B200 "
    "figures, which no second source here has, are an order of magnitude to plan with, not a "
    "quote. A machine without a host row (A4) is priced from its GPU row alone: \"GCP does not "
    "provide separate CPU/RAM pricing for A4 instances in the SKUs API. The GPU pricing (B200) "
    "includes the full VM cost.\" (fetch_gcp.py at a2f08cfd). It has no flex-start column, no "
    "A4X series and no GB200 row, and no other public price source was reachable where this was "
    "written",
)
GKE_PRICING = Source(
    "cloud.google.com/kubernetes-engine/pricing",
    f"none on the page; read {READ_ON}",
)
# The one price not in the catalogue.
CLUSTER_FEE_USD = 0.10
CLUSTER_FEE_HOW = (
    "\"A flat cluster management fee of $0.10 per cluster per hour … applies to all GKE "
    "clusters\"; the free tier credit applies only to zonal and Autopilot clusters, and this "
    "program's Standard cluster is regional"
)


class CatalogError(ValueError):
    """A catalogue file that cannot be read; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class CatalogRow:
    instance_type: str  # "" for a GPU row
    accelerator: str  # "" for a host row
    accelerator_count: int
    region: str
    zone: str
    price: float | None  # USD per hour on demand; None where the cell is empty
    spot: float | None
    line: str  # the row as the file has it, for the sources

    def usd(self, mode: Mode) -> float | None:
        return {Mode.ON_DEMAND: self.price, Mode.SPOT: self.spot}.get(mode)

    def shown(self) -> str:
        """The row as docs/cost.md quotes it: the long GpuInfo and size columns elided."""
        head = (self.instance_type if self.instance_type
                else f",,,{self.accelerator},{self.accelerator_count}")
        return f"`{head},…,{','.join(self.line.split(',')[-4:])}`"


def read_catalog(path: Path = CATALOG_FILE) -> tuple[CatalogRow, ...]:
    """The rows of a catalogue file in SkyPilot's `vms.csv` format; CatalogError for a file that
    is not one, naming the file, the line and what to give."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CatalogError(f"{path}: not a readable catalogue ({error}): give SkyPilot's "
                           "catalogs/v7/gcp/vms.csv or rows of it") from None
    header = next(csv.reader(lines[:1]), [])
    if tuple(header) != CATALOG_HEADER:
        raise CatalogError(f"{path}: line 1 is {','.join(header)!r}, not the catalogue's header "
                           f"{','.join(CATALOG_HEADER)!r}: give SkyPilot's catalogs/v7/gcp/vms.csv")
    rows = []
    for number, (line, cells) in enumerate(zip(lines[1:], csv.reader(lines[1:])), 2):
        if not line.strip():
            continue
        try:
            record = dict(zip(CATALOG_HEADER, cells, strict=True))
            rows.append(CatalogRow(
                record["InstanceType"], record["AcceleratorName"],
                int(record["AcceleratorCount"] or 0), record["Region"],
                record["AvailabilityZone"], _usd(record["Price"]), _usd(record["SpotPrice"]),
                line,
            ))
        except ValueError:
            raise CatalogError(f"{path}: line {number} ({line[:80]!r}) is not a row of "
                               f"{len(CATALOG_HEADER)} columns with numeric prices: fix or remove "
                               "it") from None
    return tuple(rows)


def _usd(cell: str) -> float | None:
    return float(cell) if cell.strip() else None


@dataclass(frozen=True)
class MachinePrice:
    """What the catalogue gives for one machine type in one region."""

    item: str
    rows: tuple[CatalogRow, ...]  # the host row and the GPU row that price it, where found
    missing: tuple[str, ...]  # what was looked for and not found

    def usd(self, mode: Mode) -> float | None:
        """The machine's hourly price in `mode`: the sum of its rows; None if a part is missing
        or a row has no figure for the mode."""
        figures = [row.usd(mode) for row in self.rows]
        if self.missing or not figures or None in figures:
            return None
        return round(sum(figures), 6)


def machine_price(
    rows: tuple[CatalogRow, ...], item: str, gpu: tuple[str, int] | None, region: str = REGION
) -> MachinePrice:
    """How the catalogue prices `item` in `region`: its host row, plus the row of `gpu` (name,
    count) for a GPU machine, each the first of the region's zones (a region's zones share a
    price). A GPU machine needs its GPU row; its host row may be absent (the GPU row then
    prices the whole VM, as the catalogue's fetcher does for A4)."""
    def first(match) -> CatalogRow | None:
        return next((row for row in rows if row.region == region and match(row)), None)

    host = first(lambda row: row.instance_type == item)
    found, missing = [host] if host else [], []
    if gpu is None:
        if host is None:
            missing.append(f"no `{item}` row")
    else:
        name, count = gpu
        gpu_row = first(lambda row: not row.instance_type and row.accelerator == name
                        and row.accelerator_count == count)
        if gpu_row is None:
            missing.append(f"no `{item}` host row and no `{name}` x {count} row"
                           if host is None else f"no `{name}` x {count} row")
        else:
            found.append(gpu_row)
    return MachinePrice(item, tuple(found), tuple(missing))


# What the figures leave out, said next to the table.
NOT_INCLUDED = (
    "the Local SSD that A3 Ultra and A4X bundle: Google bills \"attached GPUs, predefined vCPU, "
    "memory, and bundled Local SSD\" (cloud.google.com/compute/docs/accelerator-optimized-"
    "machines), and SkyPilot's fetcher leaves Local SSD out (\"Ignore local SSD pricing for "
    "now\", fetch_gcp.py); for A4 it takes the B200 SKU as the whole VM",
    "boot disks, the bucket's storage and operations, Cloud NAT, Artifact Registry, logging "
    "and monitoring, network egress",
    "discounts: committed-use or reservation contracts; flex-start prices (the catalogue has "
    "none)",
)
