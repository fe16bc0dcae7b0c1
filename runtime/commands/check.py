"""`skyhive check`: per cloud, whether this machine has credentials for it and (where the cloud's API can
say) the quotas that decide whether a GPU pool can start; for Kubernetes, whether the kubeconfig's context
answers and what it may do with pods there. Makes nothing, costs nothing."""

from __future__ import annotations

from typing import TextIO

from ...providers.base import ProvisionError
from ...providers.registry import provider_class

__all__ = ["CLOUDS", "CHECKED", "check", "report"]

CLOUDS = ("aws", "gcp", "azure", "digitalocean")
#: what `skyhive check` asks by default: the clouds, and the kubeconfig's current context
CHECKED = (*CLOUDS, "kubernetes")


def check(clouds: tuple[str, ...] = CHECKED) -> dict[str, list[tuple[str, str]]]:
    """cloud -> its (item, status) lines."""
    found: dict[str, list[tuple[str, str]]] = {}
    for name in clouds:
        try:
            cls = provider_class(name)
        except ProvisionError as exc:
            found[name] = [("available", f"no: {exc}")]
            continue
        lines = cls.check()
        found[name] = lines if lines is not None else [("available", "not a cloud")]
    return found


def report(out: TextIO, clouds: tuple[str, ...] = CHECKED) -> int:
    """Print `check` as a table; 0 if at least one cloud has credentials, else 1."""
    results = check(clouds)
    ok = False
    for cloud, lines in results.items():
        out.write(f"{cloud}:\n")
        for item, status in lines:
            out.write(f"  {item}: {status}\n")
            ok = ok or (item == "credentials" and status.startswith("found"))
    usable = [c for c, lines in results.items()
              if any(item == "credentials" and status.startswith("found") for item, status in lines)]
    out.write(f"launch --gpus without --provider ranks offers of: {', '.join(usable) or 'none (runs locally)'}\n")
    return 0 if ok else 1
