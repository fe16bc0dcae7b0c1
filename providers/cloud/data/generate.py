"""Regenerate ``aws.json``, the AWS machine table, from data shipped by two installed packages.

    python -m skyhive.providers.cloud.data.generate        # needs the dev extra (moto)

Run it in the environment ``python3 dev.py test`` makes: the two packages are then the versions
``requirements/test.lock`` pins, which the table's ``sources`` record and tests/cloud/test_cloud_aws_catalog.py
compares with the lock — a release of moto moves the table only when the lock moves (``dev.py test --latest``).

Sources, both offline: moto's ``ec2/resources/instance_types.json.gz`` (vCPUs, memory, GPU model and
count per type) and ``instance_type_offerings/availability-zone/<region>.json.gz`` (which zones offer
which type), and apache-libcloud's ``data/pricing.json`` (Linux on-demand prices per region; 0 means
unknown there). A type enters a region's table only when that region offers it and libcloud knows its
price: the table is for choosing the cheapest machine, and an unpriced one cannot be ranked.

Third source, for the GPU families: ``../shared/catalogs/aws_gap.csv`` (per-zone on-demand and spot prices
copied from SkyPilot's public catalog; provenance and gaps in ``SOURCES.md`` beside it; found through
``SKYHIVE_CATALOGS`` or the ``shared/catalogs`` folder beside the repository). It fills the types and
regions the first two lack (p3, g5.xlarge in us-west-2, g4dn.xlarge in us-east-2, ...), its price wins
where both have one (it is newer), its GPU name wins (``A100-80GB`` stays its own name), and its spot
price is kept (the dearest zone's: see `read_aws_gap`). Its zones are zone
IDs (``use2-az1``), which name different zones in each account: zone letters stay moto's, or empty.
A row the catalog lists without a price (p5e.48xlarge) is kept with price null and listed under
``sources.gaps``: said, not guessed.

Output: ``{"types": {type: [vcpus, memory_gb, gpu_model|null, gpu_count, architecture]},
"regions": {region: {type: [usd_per_hour|null, "zone letters", spot_usd_per_hour|null, source]}},
"sources": {...}}``; source is "libcloud" or "skypilot-catalog" (the price's origin).

``gcp.json``, ``digitalocean.json`` and ``azure.json`` (``python -m skyhive.providers.cloud.data.generate gcp digitalocean azure``)
are made from the CSV files in ``../shared/catalogs/`` (``$SKYHIVE_CATALOGS`` to name another folder), list
prices copied from SkyPilot's public catalog (provenance: that folder's ``SOURCES.md``, recorded in each
table's ``sources``):

- ``gcp_gpu.csv``: a GPU machine's price is its host row plus the accelerator row of the same zone and
  count (`GCP_MACHINE_GPUS` says which accelerator an A2/A3/A4/G2 machine carries; N1 machines get T4,
  V100, P100 or P4 attached, listed as ``n1-standard-8+2xT4``). Zone letters are kept (``zone_separator``
  "-": ``us-east1`` + ``b`` is ``us-east1-b``), and the spot price as a third field.
  Spot: the dearest zone's (every zone may be tried). ``machines``: per machine its boot disk type and
  the consumption models it is sold with (`GCP_SERIES`, with the pages they come from).
- ``do.csv``: droplet sizes per region (no spot). ``azure_gap.csv``: Azure's current GPU sizes in eastus
  and westus2, with the Hyper-V generations each size boots (``generations``: "V2" alone needs a Gen2 image);
  sizes retired or needing a driver the image lacks are left out (`AZURE_DROPPED`, recorded in ``sources``).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent



def read_aws_gap(path: Path) -> dict[tuple[str, str], dict]:
    """(type, region) -> {"info": [vcpus, memory, model, count, arch], "price": float|None, "spot": float|None}
    from the catalog CSV (price: the same in every zone, checked; spot: the dearest zone's — the catalog's
    zones are zone IDs, which name a different zone letter in each account, and every zone may be tried,
    so the price a pool may pay is the highest, never the cheapest zone's)."""
    rows: dict[tuple[str, str], dict] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["InstanceType"], row["Region"])
            model = row["AcceleratorName"] or None
            info = [int(float(row["vCPUs"])), float(row["MemoryGiB"]), model,
                    int(float(row["AcceleratorCount"] or 0)), row["Arch"] or "x86_64"]
            entry = rows.setdefault(key, {"info": info, "price": None, "spot": None})
            if row["Price"]:
                price = float(row["Price"])
                if entry["price"] is not None and abs(entry["price"] - price) > 1e-9:
                    raise ValueError(f"{path}: {key} has prices {entry['price']} and {price} in different zones")
                entry["price"] = price
            if row["SpotPrice"]:
                spot = float(row["SpotPrice"])
                entry["spot"] = spot if entry["spot"] is None else max(entry["spot"], spot)
    return rows


def _libcloud_pricing() -> tuple[str, dict]:
    import libcloud

    data = json.loads((Path(libcloud.__file__).parent / "data" / "pricing.json").read_text())
    return libcloud.__version__, data


def build() -> dict:
    """The AWS table (see the module docstring)."""
    import moto

    resources = Path(moto.__file__).parent / "ec2" / "resources"
    raw = json.loads(gzip.open(resources / "instance_types.json.gz").read())
    version, pricing = _libcloud_pricing()
    prices = pricing["compute"]["ec2_linux"]
    types = {}
    for name, info in sorted(raw.items()):
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
        model = gpus[0]["Name"] if gpus else None
        count = sum(g.get("Count", 0) for g in gpus)
        archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
        arch = "x86_64" if "x86_64" in archs else (archs[0] if archs else "")
        types[name] = [info["VCpuInfo"]["DefaultVCpus"], round(info["MemoryInfo"]["SizeInMiB"] / 1024, 2), model,
                       count, arch]
    regions: dict[str, dict[str, list]] = {}
    offered: dict[str, dict[str, set[str]]] = {}
    for path in sorted((resources / "instance_type_offerings" / "availability-zone").glob("*.json.gz")):
        region = path.name.removesuffix(".json.gz")
        zones: dict[str, set[str]] = defaultdict(set)
        for offer in json.loads(gzip.open(path).read()):
            zones[offer["InstanceType"]].add(offer["Location"].removeprefix(region))
        offered[region] = zones
        table = {}
        for name in sorted(zones):
            price = (prices.get(name) or {}).get(region) or 0.0
            if name in types and price > 0:
                table[name] = [price, "".join(sorted(zones[name])), None, "libcloud"]
        if table:
            regions[region] = table
    gap_path = catalogs_dir() / "aws_gap.csv"
    gaps = []
    for (name, region), entry in sorted(read_aws_gap(gap_path).items()):
        types.setdefault(name, entry["info"])
        types[name][2] = entry["info"][2]  # the catalog's GPU name: "A100-80GB" is its own name (moto: "A100")
        letters = "".join(sorted(offered.get(region, {}).get(name, ())))
        regional = regions.setdefault(region, {})
        old = regional.get(name)
        price = entry["price"] if entry["price"] is not None else (old[0] if old else None)
        source = "skypilot-catalog" if entry["price"] is not None else ("libcloud" if old else "none")
        regional[name] = [price, letters or (old[1] if old else ""), entry["spot"], source]
        if price is None:
            gaps.append(f"{name} in {region}: the catalog lists it without an on-demand price")
    used = {name for table in regions.values() for name in table}
    return {
        "sources": {"moto": moto.__version__, "apache-libcloud": version, "prices_updated": pricing.get("updated"),
                    "skypilot-catalog": "catalogs/v9/aws/vms.csv at 3e9a1751b1edfb3592877f242c2f8dc10fc1fc6e, "
                                        "GPU families of us-east-1, us-east-2, us-west-2, eu-west-1 "
                                        "(shared/catalogs/aws_gap.csv, SOURCES.md)",
                    "gaps": gaps + ["g6/g6e, p5 and p5e: no eu-west-1 rows in the catalog; p4de: no eu-west-1 or "
                                    "us-east-2 rows (not offered there, or not copied: not guessed)"]},
        "types": {name: types[name] for name in sorted(used)},
        "regions": {region: dict(sorted(table.items())) for region, table in sorted(regions.items())},
    }


def catalogs_dir() -> Path:
    """The folder of the catalog CSVs: ``$SKYHIVE_CATALOGS``, else ``shared/catalogs`` beside the repository."""
    import os

    return Path(os.environ.get("SKYHIVE_CATALOGS") or HERE.parents[2].parent / "shared" / "catalogs")


def _rows(name: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    import csv

    path = catalogs_dir() / name
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows, {"file": f"shared/catalogs/{name}", "provenance": "shared/catalogs/SOURCES.md",
                  "origin": "skypilot-org/skypilot-catalog (list prices, USD per hour; may be out of date)"}


def _price(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


#: GCE accelerator-optimized machines -> (GPU model as the catalog spells it, GPUs per machine), from
#: Google's machine-family pages (A2, A3, A4, G2). A G2 machine's GPU count follows its size.
_G2_GPUS = {"4": 1, "8": 1, "12": 1, "16": 1, "32": 1, "24": 2, "48": 4, "96": 8}


def gcp_machine_gpus(machine: str) -> tuple[str, int] | None:
    """The GPUs an A2/A3/A4/G2 machine carries, or None (a CPU machine, or one without accelerator rows)."""
    family, _, size = machine.partition("-")
    import re

    match = re.search(r"-(\d+)g(?:-|$)", size)
    count = match.group(1) if match else "0"
    if family == "a2":
        model = "A100-80GB" if size.startswith("ultragpu") else "A100"
        return model, int(count)
    if family == "a3":
        if size.startswith("megagpu"):
            return "H100-MEGA", int(count)
        return ("H200" if size.startswith("ultragpu") else "H100"), int(count)
    if family == "a4":
        return "B200", int(count)
    if family == "g2":
        return "L4", _G2_GPUS[size.rsplit("-", 1)[-1]]
    return None  # e2/n1/n2 CPU machines; g4 (RTX PRO 6000) has no accelerator rows to price it


#: GPUs that GCE attaches to N1 machines, and the counts an n1-standard-8 may carry.
N1_ATTACHED = {"T4": (1, 2, 4), "V100": (1, 2, 4, 8), "P100": (1, 2, 4), "P4": (1, 2, 4)}


#: Per GCE machine series (the longest prefix of a machine's name that is listed wins): the boot disk type
#: it takes and the consumption models it is sold with. Sources: the series tables of
#: https://cloud.google.com/compute/docs/accelerator-optimized-machines ("Supported disk types" and
#: "consumption options" per series: G2 takes no pd-standard; A3 Mega, A3 Ultra and A4 take Hyperdisk only;
#: a3-highgpu-1g/2g/4g are sold as Spot or Flex-start only; A3 Ultra and A4 by reservation, Spot or
#: Flex-start: no on-demand), https://cloud.google.com/compute/docs/general-purpose-machines (E2, N1, N2:
#: every Persistent Disk type) and https://cloud.google.com/compute/docs/disks#disk-types.
#: "on-demand" is GCE's STANDARD provisioning model, "spot" its SPOT model.
GCP_SERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "e2-": ("pd-balanced", ("on-demand", "spot")),
    "n1-": ("pd-balanced", ("on-demand", "spot")),
    "n2-": ("pd-balanced", ("on-demand", "spot")),
    "g2-": ("pd-balanced", ("on-demand", "spot", "flex-start")),
    "a2-": ("pd-balanced", ("on-demand", "spot", "flex-start")),
    "a3-highgpu-8g": ("pd-balanced", ("on-demand", "spot", "flex-start")),
    "a3-highgpu-": ("pd-balanced", ("spot", "flex-start")),
    "a3-edgegpu-": ("pd-balanced", ("on-demand", "spot")),
    "a3-megagpu-": ("hyperdisk-balanced", ("on-demand", "spot", "flex-start")),
    "a3-ultragpu-": ("hyperdisk-balanced", ("spot", "flex-start")),
    "a4-": ("hyperdisk-balanced", ("spot", "flex-start")),
}
GCP_SERIES_SOURCE = ("https://cloud.google.com/compute/docs/accelerator-optimized-machines, "
                     "https://cloud.google.com/compute/docs/general-purpose-machines")


def gcp_series(machine: str) -> tuple[str, tuple[str, ...]]:
    """(boot disk type, consumption models) of a GCE machine, by its series (see `GCP_SERIES`)."""
    prefix = max((p for p in GCP_SERIES if machine.startswith(p)), key=len, default=None)
    if prefix is None:
        raise ValueError(f"generate: GCE machine {machine} has no series in GCP_SERIES (say its disk and "
                         f"consumption models, with their source)")
    return GCP_SERIES[prefix]


def build_gcp() -> dict:
    rows, source = _rows("gcp_gpu.csv")
    hosts: dict[tuple[str, str], dict] = {}
    gpus: dict[tuple[str, int, str], tuple[float, float | None]] = {}
    for row in rows:
        zone = row["AvailabilityZone"]
        if row["InstanceType"]:
            hosts[(row["InstanceType"], zone)] = row
        elif row["AcceleratorName"] and _price(row["Price"]) is not None:
            gpus[(row["AcceleratorName"], int(row["AcceleratorCount"]), zone)] = (
                float(row["Price"]), _price(row["SpotPrice"]))
    types: dict[str, list] = {}
    offers: dict[str, dict[str, list]] = defaultdict(dict)  # region -> type -> [price, zones, spot]

    def offer(name: str, region: str, zone: str, price: float, spot: float | None) -> None:
        current = offers[region].get(name)
        letter = zone.removeprefix(region + "-")
        if current is None:
            offers[region][name] = [round(price, 5), letter, None if spot is None else round(spot, 5)]
        else:
            current[0] = min(current[0], round(price, 5))
            current[1] = "".join(sorted(set(current[1] + letter)))
            if spot is not None:
                current[2] = round(spot, 5) if current[2] is None else max(current[2], round(spot, 5))

    for (machine, zone), row in sorted(hosts.items()):
        region, vcpus, memory = row["Region"], int(float(row["vCPUs"])), float(row["MemoryGiB"])
        host_price, host_spot = _price(row["Price"]) or 0.0, _price(row["SpotPrice"])
        if machine.startswith("n1-"):
            for model, counts in N1_ATTACHED.items():
                for count in counts:
                    gpu = gpus.get((model, count, zone))
                    if gpu is None:
                        continue
                    name = f"{machine}+{count}x{model}"
                    types[name] = [vcpus, memory, model, count, "x86_64"]
                    spot = None if host_spot is None or gpu[1] is None else host_spot + gpu[1]
                    offer(name, region, zone, host_price + gpu[0], spot)
            continue
        carried = gcp_machine_gpus(machine)
        if carried is None:
            if machine.startswith(("e2-", "n2-")):
                types[machine] = [vcpus, memory, None, 0, "x86_64"]
                offer(machine, region, zone, host_price, host_spot)
            continue
        gpu = gpus.get((carried[0], carried[1], zone))
        if gpu is None:
            continue
        types[machine] = [vcpus, memory, carried[0], carried[1], "x86_64"]
        spot = None if host_spot is None or gpu[1] is None else host_spot + gpu[1]
        offer(machine, region, zone, host_price + gpu[0], spot)
    machines = {}
    for name in sorted(types):
        disk, sold = gcp_series(name.partition("+")[0])
        machines[name] = {"disk": disk, "sold": list(sold)}
    return {"sources": {**source, "series": GCP_SERIES_SOURCE}, "zone_separator": "-",
            "types": dict(sorted(types.items())), "machines": machines,
            "regions": {r: dict(sorted(t.items())) for r, t in sorted(offers.items())}}


def build_do() -> dict:
    rows, source = _rows("do.csv")
    types: dict[str, list] = {}
    regions: dict[str, dict[str, list]] = defaultdict(dict)
    for row in rows:
        count = int(float(row["AcceleratorCount"])) if row["AcceleratorCount"] else 0
        types[row["InstanceType"]] = [int(float(row["vCPUs"])), float(row["MemoryGiB"]),
                                      row["AcceleratorName"] or None, count, "x86_64"]
        regions[row["Region"]][row["InstanceType"]] = [float(row["Price"]), "", _price(row["SpotPrice"])]
    return {"sources": source, "types": dict(sorted(types.items())),
            "regions": {r: dict(sorted(t.items())) for r, t in sorted(regions.items())}}


#: Azure sizes the catalog still lists that cannot be bought or cannot run a pool, and why (with the page):
AZURE_DROPPED = {
    "Standard_NC6s_v3": "NCv3 retired 2025-09-30 (https://learn.microsoft.com/azure/virtual-machines/sizes/"
                        "retirement/ncv3-series-retirement)",
    "Standard_NC12s_v3": "NCv3 retired 2025-09-30 (same page)",
    "Standard_NC24s_v3": "NCv3 retired 2025-09-30 (same page)",
    "Standard_NC24rs_v3": "NCv3 retired 2025-09-30 (same page)",
    "Standard_NV36ads_A10_v5": "NVadsA10 v5 needs the NVIDIA GRID driver, which the pool's image lacks "
                               "(https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nvadsa10v5-series)",
    "Standard_NV36adms_A10_v5": "NVadsA10 v5 needs the GRID driver (same page)",
    "Standard_NV72ads_A10_v5": "NVadsA10 v5 needs the GRID driver (same page)",
}


def build_azure() -> dict:
    rows, source = _rows("azure_gap.csv")
    types: dict[str, list] = {}
    generations: dict[str, str] = {}
    regions: dict[str, dict[str, list]] = defaultdict(dict)
    for row in rows:
        name = row["InstanceType"]
        if name in AZURE_DROPPED:
            continue
        count = int(float(row["AcceleratorCount"]))
        if name == "Standard_ND96isr_H100_v5":
            count = 8  # the source says 12 (see SOURCES.md); Azure's ND H100 v5 size has 8 H100
        types[name] = [int(float(row["vCPUs"])), float(row["MemoryGiB"]), row["AcceleratorName"], count, "x86_64"]
        generations[name] = row["Generation"].replace(" ", "")
        regions[row["Region"]][name] = [float(row["Price"]), "", _price(row["SpotPrice"])]
    return {"sources": {**source, "dropped": AZURE_DROPPED},
            "generations": dict(sorted(generations.items())), "types": dict(sorted(types.items())),
            "regions": {r: dict(sorted(t.items())) for r, t in sorted(regions.items())}}


BUILDERS = {"aws": build, "azure": build_azure, "gcp": build_gcp, "digitalocean": build_do}


def main(argv: list[str] | None = None) -> int:
    clouds = (sys.argv[1:] if argv is None else argv) or sorted(BUILDERS)
    unknown = [c for c in clouds if c not in BUILDERS]
    if unknown:
        sys.stderr.write(f"generate: no table for {', '.join(unknown)}; known: {', '.join(sorted(BUILDERS))}\n")
        return 2
    for cloud in clouds:
        data = BUILDERS[cloud]()
        out = HERE / f"{cloud}.json"
        out.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
        sys.stderr.write(f"wrote {out}: {len(data['types'])} types, {len(data['regions'])} regions\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
