"""Public list prices of what a default `pulumi up` runs, for the README's cost table.

The program never reads these: they are facts for tools/cost.py, which multiplies them by the
node pools of each stack's offline plan. Every figure says where it was read and when it was
current, and a price that could not be found is None with the reason, never a guess. Google's
own price pages could not be read from where this was written; both machine-price sources
below are generated from Google's Cloud Billing Catalog API, the public list prices. Prices
change and differ by region and contract: re-read them before budgeting, or give tools/cost.py
your own (`make cost PRICES=my-prices.json`).
"""

from __future__ import annotations

from dataclasses import dataclass

REGION = "us-central1"  # the stack files' example region; list prices differ by region
READ_ON = "2026-11-30"  # the day the sources below were read
CLUSTER_FEE = "gke-cluster"  # the item name of the cluster management fee


@dataclass(frozen=True)
class Source:
    name: str
    dated: str  # when its figures were Google's list prices, and how that is known
    caveat: str = ""


@dataclass(frozen=True)
class ListPrice:
    item: str  # a Compute Engine machine type, or CLUSTER_FEE
    usd_per_hour: float | None  # on demand, per node (or per cluster); None: not found
    source: Source
    how: str  # the rows or sentence behind the figure, or why there is none


CYCLENERD = Source(
    "Cyclenerd/google-cloud-pricing-cost-calculator `pricing.yml` at commit fd66b26, a weekly "
    "export of the Cloud Billing Catalog API",
    "2026-07-30 (its `about.generated`)",
)
SKYPILOT = Source(
    "skypilot-org/skypilot-catalog `catalogs/v7/gcp/vms.csv` at commit 017e2502fb63, generated "
    "from the Cloud Billing Catalog API by skypilot `sky/catalog/data_fetchers/fetch_gcp.py`",
    # The file carries no date. Cyclenerd's weekly exports show $0.246624 up to 2025-08-14,
    # $0.258912 from 2025-08-30 to 2025-09-18 and $0.271872 from 2025-09-25.
    "2025-08-15 to 2025-09-24, inferred: the file has no date, but its c2-standard-16 Spot "
    "price in us-central1, $0.25891, is the one Cyclenerd's weekly exports show only then",
    "not all its GPU rows are right (it takes the first SKU whose description names the GPU, "
    "fetch_gcp.py get_gpu_price): for a3-highgpu-8g in us-central1 it gives $43.07 (host "
    "$9.46006 + eight H100 $33.60609) where Cyclenerd's export gives $88.49. Its H200 and B200 "
    "figures, which no second source here has, are an order of magnitude to plan with, not a "
    "quote",
)
GKE_PRICING = Source(
    "cloud.google.com/kubernetes-engine/pricing",
    f"none on the page; read {READ_ON}",
)

LIST_PRICES: dict[str, ListPrice] = {
    p.item: p
    for p in (
        ListPrice(
            "a4-highgpu-8g",
            90.216,
            SKYPILOT,
            "row `,,,B200,8,…,us-central1,us-central1-b,90.216,`. SkyPilot prices the whole "
            "A4 VM from its B200 SKU: \"GCP does not provide separate CPU/RAM pricing for A4 "
            "instances in the SKUs API. The GPU pricing (B200) includes the full VM cost.\" "
            "(fetch_gcp.py at a2f08cfd)",
        ),
        ListPrice(
            "a3-ultragpu-8g",
            86.75992,
            SKYPILOT,
            "host row `a3-ultragpu-8g,…,us-central1,us-central1-b,12.266,…` (vCPUs and memory) "
            "plus GPU row `,,,H200,8,…,us-central1,us-central1-b,74.49392,…` (eight H200)",
        ),
        ListPrice(
            "a4x-highgpu-4g",
            None,
            SKYPILOT,
            "no A4X or GB200 row in either catalog (SkyPilot's fetcher has no A4X series; "
            "Cyclenerd's export has no A3 Ultra, A4 or A4X), and no other public price source "
            "was reachable where this was written",
        ),
        ListPrice(
            "c2-standard-16",
            0.835232,
            CYCLENERD,
            "`compute.instance.c2-standard-16.cost.us-central1.hour: 0.835232`; SkyPilot's "
            "catalog gives the same, $0.83523",
        ),
        ListPrice(
            CLUSTER_FEE,
            0.10,
            GKE_PRICING,
            "\"A flat cluster management fee of $0.10 per cluster per hour … applies to all GKE "
            "clusters\"; the free tier credit applies only to zonal and Autopilot clusters, and "
            "this program's Standard cluster is regional",
        ),
    )
}

# What the figures leave out, said next to the table.
NOT_INCLUDED = (
    "the Local SSD that A3 Ultra and A4X bundle: Google bills \"attached GPUs, predefined vCPU, "
    "memory, and bundled Local SSD\" (cloud.google.com/compute/docs/accelerator-optimized-"
    "machines), and SkyPilot's fetcher leaves Local SSD out (\"Ignore local SSD pricing for "
    "now\", fetch_gcp.py); for A4 it takes the B200 SKU as the whole VM",
    "boot disks, the bucket's storage and operations, Cloud NAT, Artifact Registry, logging "
    "and monitoring, network egress",
    "discounts: committed-use or reservation contracts, and Spot or flex-start prices",
)
