"""What each node of a pool must have — `Pool(accelerator=, vcpus=/cpus=, memory_gb=, allocation=)` —
checked once and kept as plain values: a cloud provider picks the cheapest machine that has them, and
plugins read `accelerator` (torch: the CUDA wheel index for an NVIDIA GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..providers.accelerators import Accelerator

__all__ = ["ALLOCATIONS", "Resources"]

#: `Pool(allocation=...)`: spot only, on-demand only, spot falling back to on-demand, the cheaper one.
ALLOCATIONS = ("spot", "on-demand", "spot-if-available", "cheapest")


@dataclass(frozen=True, slots=True)
class Resources:
    """A pool's per-node requirements. Raises `ValueError`/`TypeError` naming the bad argument."""

    accelerator: Accelerator | None
    cpus: float | None
    memory_gb: float | None
    allocation: str | None

    @classmethod
    def of(cls, *, accelerator: Any, vcpus: Any, cpus: Any, memory_gb: Any, allocation: Any) -> Resources:
        if vcpus is not None and cpus is not None:
            raise TypeError("Pool() got both vcpus= and cpus= (the same thing): give one")
        if allocation is not None and allocation not in ALLOCATIONS:
            raise ValueError(f"Pool(allocation={allocation!r}): use one of {', '.join(ALLOCATIONS)}")
        if accelerator is not None:  # (the accelerator tables are read on import: only when one is asked for)
            from ..providers.accelerators import parse

            accelerator = parse(accelerator, where="Pool(accelerator)")
        return cls(accelerator=accelerator,
                   cpus=_positive("vcpus" if cpus is None else "cpus", vcpus if cpus is None else cpus),
                   memory_gb=_positive("memory_gb", memory_gb), allocation=allocation)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (for the provider and the event log). A share of one device (`L4(count=0.5)`,
        SkyPilot's `L4:0.5`) asks the provider for a node with one whole device, as the task file does."""
        return {
            "accelerator": str(self.accelerator.per_node()) if self.accelerator is not None else None,
            "cpus": self.cpus, "memory_gb": self.memory_gb, "allocation": self.allocation,
            "spot": {"spot": True, "on-demand": False}.get(self.allocation or ""),
        }


def _positive(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"Pool({name}={value!r}): need a positive number")
    return float(value)
