"""`sky.Spec`: Skyward's multi-provider pools, `sky.ComputePool(Spec(...), Spec(...), selection=...)`.

    with sky.ComputePool(
        sky.Spec(provider=sky.AWS(), accelerator=sky.accelerators.A100(), max_hourly_cost=4.0),
        sky.Spec(provider=sky.GCP(), accelerator=sky.accelerators.A100()),
        selection="cheapest",                      # or "first": in the order given
    ) as pool: ...

A `Spec` is a provider with what each node needs. The pool asks each spec's provider what it would
create and cost (`Provider.plan`, offline: no API call, nothing created), leaves out a spec whose price
is over its `max_hourly_cost` (per node, on demand) or that nothing satisfies, orders the rest —
`"cheapest"`: by that price (machines that exist already, Local/SSH/Slurm, cost nothing more; a price
nobody knows goes last), `"first"`: as given — and tries them in that order as a fallback
(`providers/fallback.py`): a provider out of capacity or quota moves on to the next.

Each Spec is a candidate of its own, as in Skyward: Specs may differ in `accelerator`, `vcpus`,
`memory_gb` and `allocation` (a spot Spec and an on-demand one, say): each candidate's provider then
gets its own Spec's values (`SpecProvider`: the pool's request with that Spec's fields put in), in
its plan (so "cheapest" compares a spot price with an on-demand one) and in its launch. The pool itself
reports the first candidate's values (`pool.accelerator`, what plugins see).

Deliberate differences from Skyward, each an error naming the field rather than a silent ignore: the
specs of one pool must agree on `nodes` (a pool has one size); `region` is the provider's own option
(`sky.AWS(region=...)`); `disk_gb`, `architecture` and `ttl` have no skyhive equivalent on a Spec.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..providers.base import ClusterSpec, NodeHandle, Provider, ProvisionError
from ..providers.delegating import Delegating
from ..providers.features import Feature

if TYPE_CHECKING:
    from ..providers.accelerators import Accelerator

__all__ = ["Spec", "SELECTIONS", "pool_arguments", "SpecProvider"]

#: `ComputePool(..., selection=...)` values.
SELECTIONS = ("cheapest", "first")
_SHAPE = ("nodes", "accelerator", "vcpus", "memory_gb", "allocation")
#: the fields in which the Specs of one pool may differ (each candidate gets its own)
_PER_CANDIDATE = ("accelerator", "vcpus", "memory_gb", "allocation")
_REFUSED = {"region": "give the region to the provider, e.g. sky.AWS(region=...)",
            "disk_gb": "the cloud providers take a disk size of their own (e.g. sky.AWS(disk_gb=...))",
            "architecture": "the machine tables choose the architecture with the instance type",
            "ttl": "bound the pool's life with Pool(autostop=...) or the provider's idle watchdog"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    """One provider and what each of its nodes needs (Skyward's `sky.Spec`); see the module docstring."""

    provider: Provider
    accelerator: str | Accelerator | None = None
    nodes: int = 1
    vcpus: float | None = None
    memory_gb: float | None = None
    allocation: str | None = None
    max_hourly_cost: float | None = None
    region: str | None = None
    disk_gb: int | None = None
    architecture: str | None = None
    ttl: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.provider, Provider):
            raise TypeError(f"Spec(provider=...) needs a skyhive provider, got {type(self.provider).__name__}")
        for name, why in _REFUSED.items():
            if getattr(self, name) is not None:
                raise ValueError(f"Spec({name}={getattr(self, name)!r}): not supported on a Spec: {why}")
        cap = self.max_hourly_cost
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0):
            raise ValueError(f"Spec(max_hourly_cost={cap!r}): need a positive number of dollars per hour")


def _price(spec: Spec) -> float | None:
    """The spec's hourly price per node as its provider plans it (0 for machines that exist already;
    None when unknown). Raises `ProvisionError` when nothing satisfies it."""
    wanted = {k: v for k, v in _requested(spec).items() if v is not None and k in spec.provider.chooses}
    plan = spec.provider.plan(ClusterSpec(pool_id="plan", nodes=spec.nodes, **wanted))
    price = plan.get("spot_price_per_hour") if spec.allocation == "spot" else None  # a spot Spec: its spot price
    if not isinstance(price, (int, float)):
        price = plan.get("price_per_hour")
    if price is None and Feature.CREATES_MACHINES not in spec.provider.features:
        return 0.0
    return None if price is None else float(price)


def _requested(spec: Spec) -> dict[str, Any]:
    """The spec's node requirements as the provider's `ClusterSpec` fields (accelerator, cpus,
    memory_gb, allocation, spot). Raises `ValueError`/`TypeError` naming a bad value."""
    from .resources import Resources

    need = Resources.of(accelerator=spec.accelerator, vcpus=spec.vcpus, cpus=None, memory_gb=spec.memory_gb,
                        allocation=spec.allocation)
    return need.as_dict()


def _own_providers(specs: Sequence[Spec]) -> list[Spec]:
    """The specs, each with a provider object of its own: one object given to several Specs (Skyward's
    `Spec(provider=aws, allocation="spot"), Spec(provider=aws, allocation="on-demand")`) is rebuilt
    from its description for the later ones, since a provider keeps what it planned for a pool."""
    from ..providers.registry import from_description

    seen: set[int] = set()
    out = []
    for s in specs:
        if id(s.provider) in seen:
            s = dataclasses.replace(s, provider=from_description(s.provider.describe()))
        seen.add(id(s.provider))
        out.append(s)
    return out


def pool_arguments(specs: Sequence[Spec], selection: str, given: dict[str, Any]) -> dict[str, Any]:
    """`Pool`'s provider and node shape for `specs`: {"provider": one provider or a list tried in
    order, "nodes", "accelerator", "vcpus", "memory_gb", "allocation"}. `given`: the shape arguments
    passed to `Pool` beside the specs (any set one is an error: the specs say it)."""
    if selection not in SELECTIONS:
        raise ValueError(f"ComputePool(selection={selection!r}): expected one of {', '.join(SELECTIONS)}")
    for s in specs:
        if not isinstance(s, Spec):
            raise TypeError(f"ComputePool(...) takes sky.Spec(...) positionally, got {type(s).__name__}")
    both = sorted(k for k, v in given.items() if v is not None)
    if both:
        raise TypeError(f"ComputePool(Spec(...), ...): {', '.join(both)} belong in each Spec, not beside them")
    specs = _own_providers(specs)
    sizes = {repr(s.nodes) for s in specs}
    if len(sizes) > 1:
        raise ValueError(f"the Specs of one pool must agree on nodes (got {', '.join(sorted(sizes))}): "
                         "a pool has one size; make one pool per size")
    differ = [name for name in _PER_CANDIDATE if len({repr(getattr(s, name)) for s in specs}) > 1]
    priced: list[tuple[float, int, Spec]] = []
    left_out: list[str] = []
    for i, s in enumerate(specs):
        try:
            price = _price(s)
        except ProvisionError as exc:
            left_out.append(f"{s.provider!r}: {exc}")
            continue
        if s.max_hourly_cost is not None and (price is None or price > s.max_hourly_cost):
            shown = "an unknown price" if price is None else f"${price:.4g}/h"
            left_out.append(f"{s.provider!r}: {shown} is over max_hourly_cost ${s.max_hourly_cost:g}/h")
            continue
        priced.append((math.inf if price is None else price, i, s))
    if not priced:
        raise ProvisionError("no Spec can be used: " + "; ".join(left_out))
    if selection == "cheapest":
        priced.sort(key=lambda t: (t[0], t[1]))
    if differ:  # each candidate its own Spec's values (the fields in which they differ)
        fields_of = {"vcpus": ("cpus",), "allocation": ("allocation", "spot")}
        keys = [k for name in differ for k in fields_of.get(name, (name,))]
        chosen: list[Provider] = [SpecProvider(s.provider, {k: _requested(s)[k] for k in keys}) for _, _, s in priced]
    else:
        chosen = [s.provider for _, _, s in priced]
    first = priced[0][2]
    return {"provider": chosen[0] if len(chosen) == 1 else chosen, "nodes": first.nodes,
            "accelerator": first.accelerator, "vcpus": first.vcpus, "memory_gb": first.memory_gb,
            "allocation": first.allocation}


class SpecProvider(Delegating):
    """`inner`, asked for its own Spec's values: every `ClusterSpec` it gets (plan, prepare, launch,
    head port) has the fields of `overrides` (accelerator, cpus, memory_gb, allocation, spot) put in.
    What a pool of Specs that differ tries as each candidate of its fallback."""

    def __init__(self, inner: Provider, overrides: Mapping[str, Any]) -> None:
        unknown = sorted(set(overrides) - {f.name for f in fields(ClusterSpec)})
        if unknown:
            raise TypeError(f"SpecProvider: {', '.join(unknown)} is no field of a provider's request")
        super().__init__(inner)
        self.overrides = dict(overrides)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.overrides.items())
        return f"{self.inner!r} with {shown}" if shown else repr(self.inner)

    def request(self, spec: ClusterSpec) -> ClusterSpec:
        return dataclasses.replace(spec, **self.overrides)

    def rewrap(self, inner: Provider) -> Provider:
        return SpecProvider(inner, self.overrides)


assert {f.name for f in fields(Spec)} >= set(_SHAPE) | set(_REFUSED)
