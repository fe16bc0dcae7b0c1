"""Regenerate ``aws.json``, the AWS machine table, from data shipped by two installed packages.

    python -m skyhive.providers.cloud.data.generate        # needs the dev extra (moto)

Sources, both offline: moto's ``ec2/resources/instance_types.json.gz`` (vCPUs, memory, GPU model and
count per type) and ``instance_type_offerings/availability-zone/<region>.json.gz`` (which zones offer
which type), and apache-libcloud's ``data/pricing.json`` (Linux on-demand prices per region; 0 means
unknown there). A type enters a region's table only when that region offers it and libcloud knows its
price: the table is for choosing the cheapest machine, and an unpriced one cannot be ranked.

Third source, for the GPU families: ``../shared/catalogs/aws_gap.csv`` (per-zone on-demand and spot prices
copied from SkyPilot's public catalog; provenance and gaps in ``SOURCES.md`` beside it; found through
``SKYHIVE_CATALOGS`` or the ``shared/catalogs`` folder beside the repository). It fills the types and
regions the first two lack (p3, g5.xlarge in us-west-2, g4dn.xlarge in us-east-2, ...), its price wins
where both have one (it is newer), and its spot price is kept (the cheapest zone's). Its zones are zone
IDs (``use2-az1``), which name different zones in each account: zone letters stay moto's, or empty.
A row the catalog lists without a price (p5e.48xlarge) is kept with price null and listed under
``sources.gaps``: said, not guessed.

Output: ``{"types": {type: [vcpus, memory_gb, gpu_model|null, gpu_count, architecture]},
"regions": {region: {type: [usd_per_hour|null, "zone letters", spot_usd_per_hour|null, source]}},
"sources": {...}}``; source is "libcloud" or "skypilot-catalog" (the price's origin).

``azure.json`` (``python -m skyhive.providers.cloud.data.generate azure``) is Azure's GPU sizes: prices per
region from libcloud's ``pricing.json`` (``azure_linux``; a size is in a region's table only where it has a
price there, i.e. where it was offered), and each size's vCPUs, memory and GPUs from `AZURE_GPU_SIZES`
below, written from Azure's published size tables (Azure's own size API reports no GPU count, and no
installed package ships one). Zone letters are empty: Azure pools are placed by region.

GCE has no table: libcloud prices only its CPU families (no GPU, no A2/A3/G2 machine) and nothing offline
says which zone offers which GPU, so `sky.GCP` takes a `machine_type` and refuses an accelerator request.
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

#: model names of the catalog -> the table's (moto's) spelling
GAP_MODELS = {"V100-32GB": "V100", "A100-80GB": "A100"}


def _catalogs() -> Path:
    given = os.environ.get("SKYHIVE_CATALOGS")
    if given:
        return Path(given)
    for base in (HERE.parents[2], *HERE.parents[2].parents):
        candidate = base / "shared" / "catalogs"
        if (candidate / "aws_gap.csv").exists():
            return candidate
    candidate = HERE.parents[2].parent / "shared" / "catalogs"
    return candidate


def read_aws_gap(path: Path) -> dict[tuple[str, str], dict]:
    """(type, region) -> {"info": [vcpus, memory, model, count, arch], "price": float|None, "spot": float|None}
    from the catalog CSV (spot: the cheapest zone's; price: the same in every zone, checked)."""
    rows: dict[tuple[str, str], dict] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["InstanceType"], row["Region"])
            model = row["AcceleratorName"] or None
            info = [int(float(row["vCPUs"])), float(row["MemoryGiB"]), GAP_MODELS.get(model, model) if model else None,
                    int(float(row["AcceleratorCount"] or 0)), row["Arch"] or "x86_64"]
            entry = rows.setdefault(key, {"info": info, "price": None, "spot": None})
            if row["Price"]:
                price = float(row["Price"])
                if entry["price"] is not None and abs(entry["price"] - price) > 1e-9:
                    raise ValueError(f"{path}: {key} has prices {entry['price']} and {price} in different zones")
                entry["price"] = price
            if row["SpotPrice"]:
                spot = float(row["SpotPrice"])
                entry["spot"] = spot if entry["spot"] is None else min(entry["spot"], spot)
    return rows

#: Azure GPU sizes: API name -> (vCPUs, memory GiB, GPU model, GPUs). From Azure's "GPU optimized" size
#: tables (NC, NCv2, NCv3, NCasT4_v3, ND, NDv2, NV, NVv3 series). AMD's fractional NVv4 sizes are left out:
#: a fraction of a GPU is not a count.
AZURE_GPU_SIZES: dict[str, tuple[int, float, str, int]] = {
    "Standard_NC6": (6, 56, "K80", 1), "Standard_NC12": (12, 112, "K80", 2),
    "Standard_NC24": (24, 224, "K80", 4), "Standard_NC24r": (24, 224, "K80", 4),
    "Standard_NC6s_v2": (6, 112, "P100", 1), "Standard_NC12s_v2": (12, 224, "P100", 2),
    "Standard_NC24s_v2": (24, 448, "P100", 4), "Standard_NC24rs_v2": (24, 448, "P100", 4),
    "Standard_NC6s_v3": (6, 112, "V100", 1), "Standard_NC12s_v3": (12, 224, "V100", 2),
    "Standard_NC24s_v3": (24, 448, "V100", 4), "Standard_NC24rs_v3": (24, 448, "V100", 4),
    "Standard_NC4as_T4_v3": (4, 28, "T4", 1), "Standard_NC8as_T4_v3": (8, 56, "T4", 1),
    "Standard_NC16as_T4_v3": (16, 110, "T4", 1), "Standard_NC64as_T4_v3": (64, 440, "T4", 4),
    "Standard_ND6s": (6, 112, "P40", 1), "Standard_ND12s": (12, 224, "P40", 2),
    "Standard_ND24s": (24, 448, "P40", 4), "Standard_ND24rs": (24, 448, "P40", 4),
    "Standard_ND40rs_v2": (40, 672, "V100", 8),
    "Standard_NV6": (6, 56, "M60", 1), "Standard_NV12": (12, 112, "M60", 2), "Standard_NV24": (24, 224, "M60", 4),
    "Standard_NV12s_v3": (12, 112, "M60", 1), "Standard_NV24s_v3": (24, 224, "M60", 2),
    "Standard_NV48s_v3": (48, 448, "M60", 4),
}


def _libcloud_pricing() -> tuple[str, dict]:
    import libcloud

    data = json.loads((Path(libcloud.__file__).parent / "data" / "pricing.json").read_text())
    return libcloud.__version__, data


def build_azure() -> dict:
    """The Azure table: every `AZURE_GPU_SIZES` size in each region where libcloud has its Linux price."""
    version, pricing = _libcloud_pricing()
    prices = pricing["compute"]["azure_linux"]
    regions: dict[str, dict[str, list]] = defaultdict(dict)
    for name in AZURE_GPU_SIZES:
        key = name.lower().replace("_", "")  # libcloud spells Standard_NC6s_v3 "standardnc6sv3"
        for region, price in sorted((prices.get(key) or {}).items()):
            if isinstance(price, (int, float)) and price > 0:
                regions[region][name] = [price, ""]
    used = {name for table in regions.values() for name in table}
    return {
        "sources": {"apache-libcloud": version, "prices_updated": pricing.get("updated"),
                    "sizes": "Azure's published GPU-optimized size tables (generate.AZURE_GPU_SIZES)"},
        "types": {name: [*AZURE_GPU_SIZES[name], "x86_64"] for name in sorted(used)},
        "regions": {region: dict(sorted(table.items())) for region, table in sorted(regions.items())},
    }


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
    gap_path = _catalogs() / "aws_gap.csv"
    gaps = []
    for (name, region), entry in sorted(read_aws_gap(gap_path).items()):
        types.setdefault(name, entry["info"])
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


BUILDERS = {"aws": build, "azure": build_azure}


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
