"""Regenerate ``aws.json``, the AWS machine table, from data shipped by two installed packages.

    python -m skyhive.providers.cloud.data.generate        # needs the dev extra (moto)

Sources, both offline: moto's ``ec2/resources/instance_types.json.gz`` (vCPUs, memory, GPU model and
count per type) and ``instance_type_offerings/availability-zone/<region>.json.gz`` (which zones offer
which type), and apache-libcloud's ``data/pricing.json`` (Linux on-demand prices per region; 0 means
unknown there). A type enters a region's table only when that region offers it and libcloud knows its
price: the table is for choosing the cheapest machine, and an unpriced one cannot be ranked.

Output: ``{"types": {type: [vcpus, memory_gb, gpu_model|null, gpu_count, architecture]},
"regions": {region: {type: [usd_per_hour, "zone letters"]}}, "sources": {...}}``.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).with_name("aws.json")


def build() -> dict:
    import libcloud
    import moto

    resources = Path(moto.__file__).parent / "ec2" / "resources"
    raw = json.loads(gzip.open(resources / "instance_types.json.gz").read())
    prices = json.loads((Path(libcloud.__file__).parent / "data" / "pricing.json").read_text())["compute"]["ec2_linux"]
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
        "sources": {"moto": moto.__version__, "apache-libcloud": libcloud.__version__,
                    "prices_updated": json.loads((Path(libcloud.__file__).parent / "data" / "pricing.json")
                                                 .read_text()).get("updated")},
        "types": {name: types[name] for name in sorted(used)},
        "regions": regions,
    }


def main() -> int:
    data = build()
    OUT.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    sys.stderr.write(f"wrote {OUT}: {len(data['types'])} types, {len(data['regions'])} regions\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
