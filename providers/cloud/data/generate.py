"""Regenerate ``aws.json``, the AWS machine table, from data shipped by two installed packages.

    python -m skyhive.providers.cloud.data.generate        # needs the dev extra (moto)

Sources, both offline: moto's ``ec2/resources/instance_types.json.gz`` (vCPUs, memory, GPU model and
count per type) and ``instance_type_offerings/availability-zone/<region>.json.gz`` (which zones offer
which type), and apache-libcloud's ``data/pricing.json`` (Linux on-demand prices per region; 0 means
unknown there). A type enters a region's table only when that region offers it and libcloud knows its
price: the table is for choosing the cheapest machine, and an unpriced one cannot be ranked.

Output: ``{"types": {type: [vcpus, memory_gb, gpu_model|null, gpu_count, architecture]},
"regions": {region: {type: [usd_per_hour, "zone letters"]}}, "sources": {...}}``.

``azure.json`` (``python -m skyhive.providers.cloud.data.generate azure``) is Azure's GPU sizes: prices per
region from libcloud's ``pricing.json`` (``azure_linux``; a size is in a region's table only where it has a
price there, i.e. where it was offered), and each size's vCPUs, memory and GPUs from `AZURE_GPU_SIZES`
below, written from Azure's published size tables (Azure's own size API reports no GPU count, and no
installed package ships one). Zone letters are empty: Azure pools are placed by region.

GCE has no table: libcloud prices only its CPU families (no GPU, no A2/A3/G2 machine) and nothing offline
says which zone offers which GPU, so `sky.GCP` takes a `machine_type` and refuses an accelerator request.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent

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
    for path in sorted((resources / "instance_type_offerings" / "availability-zone").glob("*.json.gz")):
        region = path.name.removesuffix(".json.gz")
        zones: dict[str, set[str]] = defaultdict(set)
        for offer in json.loads(gzip.open(path).read()):
            zones[offer["InstanceType"]].add(offer["Location"].removeprefix(region))
        table = {}
        for name in sorted(zones):
            price = (prices.get(name) or {}).get(region) or 0.0
            if name in types and price > 0:
                table[name] = [price, "".join(sorted(zones[name]))]
        if table:
            regions[region] = table
    used = {name for table in regions.values() for name in table}
    return {
        "sources": {"moto": moto.__version__, "apache-libcloud": version, "prices_updated": pricing.get("updated")},
        "types": {name: types[name] for name in sorted(used)},
        "regions": regions,
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
