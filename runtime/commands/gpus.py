"""`skyhive show-gpus`: the accelerators in the shipped machine tables (`providers/cloud/data/*.json`), with
the count per machine, the cheapest instance type that has them, its vCPUs, memory and on-demand price.

No cloud API is called. Like SkyPilot's `sky show-gpus`: no argument lists every accelerator; `A100`
lists its counts; `A100:8` only machines with exactly 8; `--all-regions` one row per region instead of
the cloud's default region.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from ...providers.cloud import catalog
from ...providers.registry import provider_class
from .taskfile import TaskFileError
from .values import parse_accelerators

__all__ = ["gpu_rows", "gpu_records", "clouds"]


def clouds() -> list[str]:
    """The clouds whose machine table this install ships."""
    data = resources.files("skyhive.providers.cloud.data")
    names = (p.name.removesuffix(".json") for p in data.iterdir() if p.name.endswith(".json"))
    return sorted(n for n in names if "regions" in catalog.table(n))  # accelerators.json is no machine table


def _default_region(cloud: str) -> str | None:
    """The region a provider built with no arguments uses (building one calls no API)."""
    region = provider_class(cloud)().describe().get("region")
    return region if isinstance(region, str) else None


def _has_gpus(cloud: str, region: str | None) -> bool:
    types = catalog.table(cloud)["regions"].get(region or "", {})
    return any((info := catalog.instance(cloud, t)) is not None and info.accelerators for t in types)


def gpu_rows(accelerator: str | None = None, *, cloud: str | None = None, region: str | None = None,
             all_regions: bool = False) -> list[tuple[str, ...]]:
    """Rows of (GPU, QTY, CLOUD, INSTANCE_TYPE, vCPUs, MEMORY, $/h, REGION), sorted by GPU, count, price.
    Raises `TaskFileError` for a malformed NAME[:COUNT] or an unknown cloud or region."""
    return [(r["accelerator"], str(r["count"]), r["cloud"], r["instance_type"], str(r["vcpus"]),
             f"{r['memory_gb']:g}GB", f"${r['price_per_hour']:.4g}", r["region"])
            for r in gpu_records(accelerator, cloud=cloud, region=region, all_regions=all_regions)]


def gpu_records(accelerator: str | None = None, *, cloud: str | None = None, region: str | None = None,
                all_regions: bool = False) -> list[dict[str, Any]]:
    """`gpu_rows` as plain values (`show-gpus --json`): accelerator, count, cloud, instance_type, vcpus,
    memory_gb, price_per_hour (USD, on-demand), region."""
    want_name = want_count = None
    if accelerator:
        try:
            want_name, count = parse_accelerators(accelerator)
        except ValueError as exc:
            raise TaskFileError(f"show-gpus {accelerator}: {exc}") from None
        want_count = count if ":" in accelerator else None
    known = clouds()
    if cloud is not None and cloud.lower() not in known:
        raise TaskFileError(f"show-gpus --cloud {cloud}: no machine table for it (known: {', '.join(known)})")
    rows: list[tuple[str, int, float, str, dict[str, Any]]] = []
    for name in [cloud.lower()] if cloud else known:
        table = catalog.table(name)
        if region is not None and region not in table["regions"]:
            if cloud is not None:
                raise TaskFileError(f"show-gpus --region {region}: {name} has no region {region!r}")
            continue
        regions = [region] if region else (sorted(table["regions"]) if all_regions else [_default_region(name)])
        if not region and not all_regions and not _has_gpus(name, regions[0]):
            regions = sorted(table["regions"])  # DigitalOcean's GPUs are not in its default region
        for where in regions:
            best: dict[tuple[str, int], tuple[float, str]] = {}
            for itype, (price, *_rest) in table["regions"].get(where, {}).items():  # [price, zones, (spot, source)]
                info = catalog.instance(name, itype)
                if info is None or not info.accelerator or price is None:
                    continue
                if want_name is not None and info.accelerator.lower() != want_name.lower():
                    continue
                if want_count is not None and info.accelerators != want_count:
                    continue
                key = (info.accelerator, info.accelerators)
                if key not in best or (price, itype) < best[key]:
                    best[key] = (price, itype)
            for (model, count), (price, itype) in best.items():
                info = catalog.instance(name, itype)
                assert info is not None
                rows.append((model.lower(), count, price, itype, {
                    "accelerator": model, "count": count, "cloud": name, "instance_type": itype,
                    "vcpus": info.vcpus, "memory_gb": info.memory_gb, "price_per_hour": price, "region": str(where)}))
    return [row for *_, row in sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3]))]
