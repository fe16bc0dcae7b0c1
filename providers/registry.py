"""Providers by name: build one from the command line, or rebuild one from the event log.

A pool's log records its provider's `describe()` (a dict of plain values whose `"provider"` key is the
provider's `name`). `from_description` turns that back into a provider, so `skyhive down` can destroy
the nodes of a client that crashed (with `Provider.from_description`, which a provider may override).

Where names come from:
- `PROVIDERS`: the providers of skyhive itself, as (module, class). Some are planned but not built yet:
  their module does not exist in this install, and naming one is a `ProviderNotAvailable` that says
  "not built yet" — `names()` lists only the ones whose module exists.
- the entry-point group `skyhive.providers` of other installed packages (`name = "module:Class"`), so
  `skyhive launch --provider NAME` and `skyhive down` find a third party's provider by name. A
  built-in name wins over an entry point of the same name.

Provider modules are imported lazily: a provider whose SDK is missing is a `ProviderNotAvailable`
naming the package, not an ImportError.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping, Sequence
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

from ..errors import ProviderNotAvailable, ProvisionError
from .base import Provider
from .features import Feature

log = logging.getLogger("skyhive.providers")

__all__ = ["PROVIDERS", "ENTRY_POINT_GROUP", "names", "planned", "canonical", "provider_class",
           "from_description", "from_cli", "offering"]

#: name -> (module, class). Names are what `Provider.name` and `skyhive launch --provider` use.
PROVIDERS: dict[str, tuple[str, str]] = {
    "local": ("skyhive.providers.local", "Local"),
    "ssh": ("skyhive.providers.ssh", "SSH"),
    "aws": ("skyhive.providers.cloud.aws", "AWS"),
    "gcp": ("skyhive.providers.cloud.gcp", "GCP"),
    "azure": ("skyhive.providers.cloud.azure", "Azure"),
    "digitalocean": ("skyhive.providers.cloud.digitalocean", "DigitalOcean"),
    "slurm": ("skyhive.providers.slurm", "Slurm"),
    "simulated": ("skyhive.providers.simulated", "Simulated"),
    "kubernetes": ("skyhive.providers.kubernetes", "Kubernetes"),
    "fallback": ("skyhive.providers.fallback", "Fallback"),
}
# the spellings SkyPilot task files use for the same clouds
_ALIASES = {"k8s": "kubernetes", "do": "digitalocean", "ec2": "aws", "gce": "gcp", "google": "gcp", "amazon": "aws"}

#: Entry-point group through which other packages add providers (name = "module:Class").
ENTRY_POINT_GROUP = "skyhive.providers"


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _entry_points() -> dict[str, Any]:
    return {ep.name.lower(): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """The provider names this install can use: built-in ones whose module exists, and entry points."""
    built = [name for name, (module, _) in PROVIDERS.items() if _exists(module)]
    return sorted({*built, *_entry_points()})


def planned() -> list[str]:
    """Built-in provider names whose module is not in this install (not built yet)."""
    return sorted(name for name, (module, _) in PROVIDERS.items() if not _exists(module))


def canonical(name: str) -> str:
    """The registry name for `name` (case-insensitive, with SkyPilot's aliases); raises `ProvisionError`
    for a name nobody registered. A planned provider's name is accepted here (using it is what fails)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PROVIDERS and key not in _entry_points():
        later = planned()
        raise ProvisionError(f"unknown provider {name!r}: skyhive knows {', '.join(names())}"
                             + (f" (not built yet: {', '.join(later)})" if later else ""))
    return key


def provider_class(name: str) -> type[Provider]:
    """The provider class registered as `name`; raises `ProviderNotAvailable` if this install lacks it."""
    key = canonical(name)
    if key in PROVIDERS:
        module_name, class_name = PROVIDERS[key]
        where = f"{module_name}.{class_name}"
        try:
            module = import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                raise ProviderNotAvailable(
                    f"provider {key!r} is not available in this install of skyhive: it is not built yet "
                    f"({module_name} does not exist)") from None
            raise ProviderNotAvailable(f"provider {key!r} needs a package that is not installed: {exc}") from None
        cls = getattr(module, class_name, None)
    else:
        ep = _entry_points()[key]
        where = f"{ep.value} (entry point {key!r} of group {ENTRY_POINT_GROUP})"
        try:
            cls = ep.load()
        except Exception as exc:  # noqa: BLE001 - a third party's import error: name it, keep the cause
            raise ProviderNotAvailable(f"provider {key!r} from {where} cannot be loaded: "
                                       f"{type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProviderNotAvailable(f"{where} is not a skyhive provider (a subclass of skyhive.providers.base.Provider)")
    return cls


def from_description(desc: Mapping[str, Any]) -> Provider:
    """Rebuild a provider from its `describe()` (as recorded in a pool's `PoolStarted` event)."""
    name = desc.get("provider")
    if not isinstance(name, str) or not name:
        raise ProvisionError(f"the pool's log does not say which provider made it: {dict(desc)!r}")
    return provider_class(name).from_description(dict(desc))


def from_cli(name: str, *, hosts: Sequence[str] = (), options: Mapping[str, Any] | None = None) -> Provider:
    """The provider `skyhive launch --provider NAME [--hosts ...]` asks for, built with `options` (keyword
    arguments from the task's resources: see `Provider.resource_options`)."""
    key = canonical(name)
    options = dict(options or {})
    cls = provider_class(key)
    if Feature.HOSTS in cls.features:  # it runs on the hosts the user names
        if not hosts:
            raise ProvisionError(f"the {key} provider needs hosts: pass --hosts HOST [HOST ...] (head first)")
        return cls(hosts=list(hosts), **options)  # type: ignore[call-arg]
    if hosts:
        takes = [n for n, c in offering(Feature.HOSTS) if c is not None]
        raise ProvisionError(f"--hosts is for the {' and '.join(takes) or 'ssh'} provider; provider {key!r} does "
                             "not take hosts")
    try:
        return cls(**options)
    except ValueError as exc:  # a bad option value, e.g. a disk too small
        raise ProvisionError(f"provider {key!r}: {exc}") from None


def offering(feature: Feature) -> list[tuple[str, type[Provider] | None]]:
    """The registered providers whose declaration offers `feature` (`Provider.features`), built-in ones in
    `PROVIDERS`' order and then entry points by name, each with its class; a provider that cannot be
    loaded here is listed too, with None (its declaration cannot be read: whoever lists it says why)."""
    found: list[tuple[str, type[Provider] | None]] = []
    for name in [n for n in PROVIDERS if _exists(PROVIDERS[n][0])] + sorted(set(_entry_points()) - set(PROVIDERS)):
        try:
            cls = provider_class(name)
        except ProvisionError:
            found.append((name, None))
            continue
        if feature in cls.features:
            found.append((name, cls))
    return found
