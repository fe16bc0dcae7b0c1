"""`skyhive check`: per cloud, whether this machine has credentials for it and (where the cloud's API can
say) the quotas that decide whether a GPU pool can start; for Kubernetes, whether the kubeconfig's context
answers and what it may do with pods there. Makes nothing, costs nothing."""

from __future__ import annotations

from typing import TextIO

from ...providers.base import ProvisionError
from ...providers.features import Feature
from ...providers.registry import offering, provider_class

__all__ = ["clouds", "check", "report"]


def clouds() -> tuple[str, ...]:
    """The providers `skyhive check` reports on: those whose declaration offers `Feature.CHECK` (the
    clouds), and any registered one that cannot be loaded here (it is listed with why)."""
    return tuple(name for name, _ in offering(Feature.CHECK))


def check(names: tuple[str, ...] | None = None) -> dict[str, list[tuple[str, str]]]:
    """cloud -> its (item, status) lines (`names`: default, `clouds()`)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for name in clouds() if names is None else names:
        try:
            cls = provider_class(name)
        except ProvisionError as exc:
            found[name] = [("available", f"no: {exc}")]
            continue
        lines = cls.check()
        found[name] = lines if lines is not None else [("available", "not a cloud")]
    return found


def report(out: TextIO, names: tuple[str, ...] | None = None) -> int:
    """Print `check` as a table; 0 (as SkyPilot's `sky check`: no cloud with credentials is an answer,
    not a failure — Local, SSH and Slurm need none)."""
    results = check(names)
    for cloud, lines in results.items():
        out.write(f"{cloud}:\n")
        for item, status in lines:
            out.write(f"  {item}: {status}\n")
    usable = [c for c, lines in results.items()
              if any(item == "credentials" and status.startswith("found") for item, status in lines)]
    out.write(f"launch --gpus without --provider ranks offers of: {', '.join(usable) or 'none (runs locally)'}\n")
    return 0
