"""Providers by name: build one from the command line, or rebuild one from the event log.

A pool's log records its provider's `describe()` (a dict of plain values whose `"provider"` key is the
provider's `name`). `from_description` turns that back into a provider, so `skyhive down` can destroy
the nodes of a client that crashed. A provider class rebuilds itself with a classmethod
`from_description(desc)` when it has one, else with `cls(**desc_without_"provider")`.

Provider modules are imported lazily: naming one that this install does not have is a
`ProvisionError` that says so, not an ImportError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import Any

from .base import Provider, ProvisionError

__all__ = ["PROVIDERS", "names", "provider_class", "from_description", "from_cli"]

#: name -> (module, class). Names are what `Provider.name` and `skyhive launch --provider` use.
PROVIDERS: dict[str, tuple[str, str]] = {
    "local": ("skyhive.providers.local", "Local"),
    "ssh": ("skyhive.providers.ssh", "SSH"),
    "aws": ("skyhive.providers.aws", "AWS"),
    "gcp": ("skyhive.providers.gcp", "GCP"),
    "azure": ("skyhive.providers.azure", "Azure"),
    "digitalocean": ("skyhive.providers.digitalocean", "DigitalOcean"),
    "slurm": ("skyhive.providers.slurm", "Slurm"),
    "simulated": ("skyhive.providers.simulated", "Simulated"),
}
# the spellings SkyPilot task files use for the same clouds
_ALIASES = {"do": "digitalocean", "ec2": "aws", "gce": "gcp", "google": "gcp", "amazon": "aws"}


def names() -> list[str]:
    return sorted(PROVIDERS)


def canonical(name: str) -> str:
    """The registry name for `name` (case-insensitive, with SkyPilot's aliases); raises `ProvisionError`."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PROVIDERS:
        raise ProvisionError(f"unknown provider {name!r}: skyhive knows {', '.join(names())}")
    return key


def provider_class(name: str) -> type[Provider]:
    """The provider class registered as `name`; raises `ProvisionError` if this install lacks it."""
    key = canonical(name)
    module_name, class_name = PROVIDERS[key]
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ProvisionError(
                f"provider {key!r} is not available in this install of skyhive ({module_name} is missing)"
            ) from None
        raise ProvisionError(f"provider {key!r} needs a package that is not installed: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProvisionError(f"{module_name}.{class_name} is not a skyhive provider")
    return cls


def from_description(desc: Mapping[str, Any]) -> Provider:
    """Rebuild a provider from its `describe()` (as recorded in a pool's `PoolStarted` event)."""
    name = desc.get("provider")
    if not isinstance(name, str) or not name:
        raise ProvisionError(f"the pool's log does not say which provider made it: {dict(desc)!r}")
    cls = provider_class(name)
    rebuild = getattr(cls, "from_description", None)
    if callable(rebuild):
        return rebuild(dict(desc))  # type: ignore[no-any-return]
    kwargs = {k: v for k, v in desc.items() if k != "provider"}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProvisionError(f"cannot rebuild provider {name!r} from the pool's log ({kwargs!r}): {exc}") from None


def from_cli(name: str, *, hosts: Sequence[str] = ()) -> Provider:
    """The provider `skyhive launch --provider NAME [--hosts ...]` asks for."""
    key = canonical(name)
    if key == "ssh":
        if not hosts:
            raise ProvisionError("the ssh provider needs hosts: pass --hosts HOST [HOST ...] (head first)")
        return provider_class(key)(hosts=list(hosts))  # type: ignore[call-arg]
    if hosts:
        raise ProvisionError(f"--hosts is for the ssh provider; provider {key!r} does not take hosts")
    return provider_class(key)()
