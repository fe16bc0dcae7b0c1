"""Machines as data: choose the cheapest instance type that satisfies a pool's accelerator, cpus and memory.

The tables are generated at development time (`providers/cloud/data/generate.py`) and shipped with the
package; nothing here calls a cloud. Accelerators are spelled "A100" (any count, the cheapest wins) or
"A100:8" (exactly 8 per node); names compare case-insensitively and mean the same on every cloud
(`same_model`: "A100" is any A100, "A100-80GB" only the 80 GB one).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..base import ProvisionError

__all__ = ["InstanceInfo", "Choice", "parse_accelerator", "instance", "choose", "offered", "unpriced", "sold",
           "boot_disk"]

#: how a machine is bought: on demand, or spot (a table's ``machines`` say which a machine is sold with;
#: a machine they do not list is sold both ways)
ON_DEMAND, SPOT = "on-demand", "spot"

#: Without any requirement a pool gets the cheapest machine with at least this much.
DEFAULT_CPUS = 2.0
DEFAULT_MEMORY_GB = 4.0


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceInfo:
    """One instance type: vCPUs, memory, and its GPUs (model and count per node)."""

    instance_type: str
    vcpus: int
    memory_gb: float
    accelerator: str | None
    accelerators: int
    arch: str = "x86_64"


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """The machine chosen for a pool, what it costs, and what the pool costs per hour."""

    cloud: str
    region: str
    instance_type: str
    vcpus: int
    memory_gb: float
    accelerator: str | None
    accelerators: int
    price_per_hour: float | None  # on-demand USD; None when the table has no price (a fixed type)
    nodes: int
    spot: bool
    zones: tuple[str, ...] = ()
    #: the table's spot price (USD/h, its cheapest zone), where it has one; "" / None: none known
    spot_price_per_hour: float | None = None
    #: where the price comes from ("libcloud", "skypilot-catalog"; "" when the table says nothing)
    price_source: str = ""

    @property
    def hourly(self) -> float | None:
        """What one node costs per hour: the spot price for a spot pool where the table has one, else on-demand."""
        if self.spot and self.spot_price_per_hour is not None:
            return self.spot_price_per_hour
        return self.price_per_hour

    @property
    def cost_per_hour(self) -> float | None:
        """The pool's estimated cost per hour (`hourly` × nodes; a spot pool without a spot price is
        estimated at on-demand, which it will not exceed)."""
        return None if self.hourly is None else round(self.hourly * self.nodes, 4)

    def summary(self) -> str:
        if not self.vcpus:  # a type taken on trust (`unpriced`): nothing known about it but its name
            return f"{self.instance_type} in {self.region}{' (spot)' if self.spot else ''}: price unknown"
        gpus = f", {self.accelerators}x {self.accelerator}" if self.accelerator else ""
        if self.spot and self.spot_price_per_hour is not None:
            on_demand = "" if self.price_per_hour is None else f" (on demand ${self.price_per_hour:.4g}/h)"
            price = (f"${self.spot_price_per_hour:.4g}/h spot{on_demand}, pool of {self.nodes}: "
                     f"${self.cost_per_hour:.4g}/h")
        else:
            price = "price unknown" if self.price_per_hour is None else (
                f"${self.price_per_hour:.4g}/h on demand{' (spot: less)' if self.spot else ''}, "
                f"pool of {self.nodes}: ${self.cost_per_hour:.4g}/h")
        return (f"{self.instance_type} in {self.region} ({self.vcpus} vCPU, {self.memory_gb:g} GB{gpus}): {price}")

    def as_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "region": self.region, "instance_type": self.instance_type,
                "vcpus": self.vcpus, "memory_gb": self.memory_gb, "accelerator": self.accelerator,
                "accelerators": self.accelerators, "price_per_hour": self.price_per_hour,
                "cost_per_hour": self.cost_per_hour, "nodes": self.nodes, "spot": self.spot,
                "spot_price_per_hour": self.spot_price_per_hour, "price_source": self.price_source}


def table(cloud: str) -> dict[str, Any]:
    """The machine table this install ships for `cloud` (its "regions", "types", ...), as read once."""
    return _table(cloud)


@functools.cache
def _table(cloud: str) -> dict[str, Any]:
    try:
        text = resources.files("skyhive.providers.cloud.data").joinpath(f"{cloud}.json").read_text()
    except FileNotFoundError:
        raise ProvisionError(f"no machine table for cloud {cloud!r} in this install of skyhive") from None
    return json.loads(text)  # type: ignore[no-any-return]


def parse_accelerator(spec: str) -> tuple[str, int | None]:
    """"A100" -> ("A100", None); "A100:8" -> ("A100", 8). Raises ValueError naming the bad spelling."""
    name, sep, count = spec.strip().partition(":")
    if not name or (sep and not count.strip().isdigit()) or (sep and int(count) < 1):
        raise ValueError(f"accelerator must look like 'A100' or 'A100:8', not {spec!r}")
    return name.strip(), int(count) if sep else None


def instance(cloud: str, instance_type: str) -> InstanceInfo | None:
    """What the table knows about one instance type, or None."""
    row = _table(cloud)["types"].get(instance_type)
    if row is None:
        return None
    vcpus, memory, model, count, arch = row
    return InstanceInfo(instance_type=instance_type, vcpus=vcpus, memory_gb=memory, accelerator=model,
                        accelerators=count, arch=arch)


def sold(cloud: str, instance_type: str) -> tuple[str, ...]:
    """The consumption models the cloud sells `instance_type` with ("on-demand", "spot", "flex-start"), from
    the table's ``machines`` (its source in the table's ``sources``); both on-demand and spot where unlisted."""
    entry = _table(cloud).get("machines", {}).get(instance_type)
    return tuple(entry["sold"]) if entry else (ON_DEMAND, SPOT)


def boot_disk(cloud: str, instance_type: str) -> str | None:
    """The boot disk type the table says `instance_type` takes, or None (the cloud's default will do)."""
    entry = _table(cloud).get("machines", {}).get(instance_type)
    return entry.get("disk") if entry else None


def _model(spot: bool) -> str:
    return SPOT if spot else ON_DEMAND


def same_model(have: str | None, want: str) -> bool:
    """Whether a machine's GPU `have` is what `want` names, the same on every cloud: the exact name, or
    `want` with a memory size the bare name leaves open ("A100" is any A100, "A100-80GB" or the 40 GB
    one; "A100-80GB" is only that; "H100" is not "H100-MEGA")."""
    if not have:
        return False
    have, want = have.lower(), want.lower()
    return have == want or (have.startswith(want + "-") and re.fullmatch(r"\d+gb", have[len(want) + 1:]) is not None)


def offered(cloud: str, accelerator: str) -> dict[str, list[int]]:
    """Region -> the counts per node (sorted) in which its instance types offer this accelerator model."""
    table = _table(cloud)
    found: dict[str, set[int]] = {}
    for region, types in sorted(table["regions"].items()):
        for itype in types:
            info = instance(cloud, itype)
            if info and same_model(info.accelerator, accelerator):
                found.setdefault(region, set()).add(info.accelerators)
    return {region: sorted(counts) for region, counts in found.items()}


def choose(cloud: str, region: str, *, accelerator: str | None = None, cpus: float | None = None,
           memory_gb: float | None = None, instance_type: str | None = None, nodes: int = 1,
           spot: bool = False, cpus_exact: bool = False, memory_exact: bool = False) -> Choice:
    """The cheapest type in `region` with `accelerator` ("A100", "A100:8") and at least `cpus` vCPUs and
    `memory_gb` GB (exactly, with `cpus_exact`/`memory_exact`: SkyPilot's `8` as opposed to `8+`); or
    `instance_type` as given (checked against the requirements when the table knows it). Raises
    `ProvisionError` naming what is missing and where it is offered instead."""
    exact = (cpus_exact, memory_exact)
    table = _table(cloud)
    regional = table["regions"].get(region)
    if regional is None:
        raise ProvisionError(f"{cloud}: unknown region {region!r}; known: {', '.join(sorted(table['regions']))}",
                             kind="unavailable")
    want_name, want_count = parse_accelerator(accelerator) if accelerator else (None, None)
    if instance_type is not None:
        info = instance(cloud, instance_type)
        price = regional.get(instance_type, [None, ""])
        if info is None:  # a type newer than the table: taken on trust
            return unpriced(cloud, region, instance_type, nodes=nodes, spot=spot)
        problem = _unmet(info, want_name, want_count, cpus, memory_gb, exact)
        if problem:
            raise ProvisionError(f"{cloud}: instance_type {instance_type} does not satisfy the pool: {problem}",
                                 kind="unavailable")
        if _model(spot) not in sold(cloud, instance_type):
            raise ProvisionError(_not_sold(cloud, region, info, spot), kind="unavailable")
        return _choice(cloud, region, info, price, nodes, spot)
    if want_name is None:
        cpus = DEFAULT_CPUS if cpus is None else cpus
        memory_gb = DEFAULT_MEMORY_GB if memory_gb is None else memory_gb
    best: tuple[float, str] | None = None
    unsold: list[tuple[float, str]] = []  # what would fit, were it sold the way the pool buys
    for itype, row in regional.items():
        price = row[0]
        info = instance(cloud, itype)
        if price is None or info is None or _unmet(info, want_name, want_count, cpus, memory_gb, exact):
            continue
        if want_name is None and info.accelerators:  # no GPU asked for: do not pay for one
            continue
        if info.arch != "x86_64":  # the default images (and most wheels users pin) are x86_64
            continue
        if _model(spot) not in sold(cloud, itype):  # not sold the way the pool buys (GCE's a3-highgpu-1g on demand)
            unsold.append((price, itype))
            continue
        if best is None or (price, itype) < best:
            best = (price, itype)
    if best is None and unsold:
        info = instance(cloud, min(unsold)[1])
        assert info is not None
        raise ProvisionError(_not_sold(cloud, region, info, spot), kind="unavailable")
    if best is None:
        raise ProvisionError(_nothing_fits(cloud, region, accelerator, want_name, cpus, memory_gb, exact),
                             kind="unavailable")
    info = instance(cloud, best[1])
    assert info is not None
    return _choice(cloud, region, info, regional[best[1]], nodes, spot)


def _not_sold(cloud: str, region: str, info: InstanceInfo, spot: bool) -> str:
    """Why `info` cannot be bought as asked, naming how it is sold and what can be bought instead."""
    models = sold(cloud, info.instance_type)
    text = (f"{cloud}: {info.instance_type} is not sold {_model(spot)} (only {', '.join(models)}): "
            f"{'ask for spot' if SPOT in models else 'it cannot be bought here'}")
    if info.accelerator:
        alternatives = []
        for itype, row in sorted(_table(cloud)["regions"].get(region, {}).items(), key=lambda kv: (kv[1][0] is None,
                                                                                                    kv[1][0] or 0)):
            other = instance(cloud, itype)
            if (other and itype != info.instance_type and other.accelerator == info.accelerator
                    and _model(spot) in sold(cloud, itype)):
                alternatives.append(f"{itype} ({other.accelerators}x {other.accelerator})")
        text += (f", or take {', '.join(alternatives[:4])} {_model(spot)} in {region}" if alternatives
                 else f"; no {info.accelerator} machine in {region} is sold {_model(spot)}")
    return text


def unpriced(cloud: str, region: str, instance_type: str, *, nodes: int, spot: bool) -> Choice:
    """A machine named by the user or the provider's default, not in any table: taken on trust, no
    price (vCPUs, memory and GPUs unknown, shown as 0)."""
    return Choice(cloud=cloud, region=region, instance_type=instance_type, vcpus=0, memory_gb=0.0,
                  accelerator=None, accelerators=0, price_per_hour=None, nodes=nodes, spot=spot)


def _choice(cloud: str, region: str, info: InstanceInfo, price: list[Any], nodes: int, spot: bool) -> Choice:
    separator = _table(cloud).get("zone_separator", "")  # GCE: us-east1 + "-" + b
    zones = tuple(region + separator + letter for letter in (price[1] or ""))
    spot_price = price[2] if len(price) > 2 else None  # rows: [price, zone letters, spot price, source]
    source = price[3] if len(price) > 3 else ""
    return Choice(cloud=cloud, region=region, instance_type=info.instance_type, vcpus=info.vcpus,
                  memory_gb=info.memory_gb, accelerator=info.accelerator, accelerators=info.accelerators,
                  price_per_hour=price[0], nodes=nodes, spot=spot, zones=zones, spot_price_per_hour=spot_price,
                  price_source=source)


def _unmet(info: InstanceInfo, name: str | None, count: int | None, cpus: float | None,
           memory_gb: float | None, exact: tuple[bool, bool] = (False, False)) -> str:
    if name is not None:
        if not same_model(info.accelerator, name):
            return f"it has {info.accelerator or 'no accelerator'}, not {name}"
        if count is not None and info.accelerators != count:
            return f"it has {info.accelerators} {info.accelerator}, not {count}"
    if cpus is not None and (info.vcpus != cpus if exact[0] else info.vcpus < cpus):
        return f"it has {info.vcpus} vCPUs, {'not exactly' if exact[0] else 'fewer than'} {cpus:g}"
    if memory_gb is not None and (info.memory_gb != memory_gb if exact[1] else info.memory_gb < memory_gb):
        return f"it has {info.memory_gb:g} GB, {'not exactly' if exact[1] else 'less than'} {memory_gb:g}"
    return ""


def _nothing_fits(cloud: str, region: str, accelerator: str | None, name: str | None, cpus: float | None,
                  memory_gb: float | None, exact: tuple[bool, bool] = (False, False)) -> str:
    cmp_cpus, cmp_mem = ("exactly" if e else ">=" for e in exact)
    want = ", ".join(x for x in (accelerator and f"accelerator {accelerator}",
                                 cpus is not None and f"{cmp_cpus} {cpus:g} vCPUs" or "",
                                 memory_gb is not None and f"{cmp_mem} {memory_gb:g} GB" or "") if x)
    text = f"{cloud}: no instance type in {region} has {want}"
    if name is None:
        return text
    where = offered(cloud, name)
    if not where:
        models = sorted({row[2] for row in _table(cloud)["types"].values() if row[2]})
        return f"{text}; {cloud} offers no accelerator called {name!r} (known: {', '.join(models)})"
    listing = ", ".join(f"{where_region} (x{'/'.join(map(str, counts))})" for where_region, counts in where.items())
    return f"{text}; {name} is offered (per node) in: {listing}"
