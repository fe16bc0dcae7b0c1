"""Plugins: what a pool sets up on its nodes besides your function.

    sky.Pool(..., plugins=[sky.plugins.torch()])                          # DDP, process group ready
    sky.Pool(..., plugins=[sky.plugins.jax(), sky.plugins.keras("jax")])  # Keras across processes
    sky.Pool(..., plugins=[sky.plugins.huggingface(token=...)])           # libraries + secret token
    sky.Pool(..., plugins=[sky.plugins.sklearn()])                        # n_jobs=-1 runs on the pool

Each factory returns a small plain object with the hooks of `skyhive.plugins.api` (any object with
those hooks is a plugin too). None of these modules imports torch, jax or keras: that happens on the
workers, inside the hooks. See docs/plugins.md.

Plugins of other installed packages come through the entry-point group `skyhive.plugins`
(`name = "module:factory"`): `sky.plugins.NAME` is that factory, loaded on first use.
"""

from __future__ import annotations

from typing import Any

from ..errors import WorkerRestarted as WorkerRestarted
from .api import InstanceInfo as InstanceInfo
from .api import Plugin as Plugin
from .api import PoolView as PoolView
from .api import apply_transforms as apply_transforms
from .huggingface import huggingface as huggingface
from .jax import jax as jax
from .joblib import joblib as joblib
from .joblib import sklearn as sklearn
from .keras import keras as keras
from .torch import torch as torch

__all__ = ["Plugin", "PoolView", "InstanceInfo", "apply_transforms", "torch", "jax", "keras", "huggingface",
           "joblib", "sklearn", "WorkerRestarted", "installed", "ENTRY_POINT_GROUP"]

#: Entry-point group through which other packages add plugins (name = "module:factory").
ENTRY_POINT_GROUP = "skyhive.plugins"
_BUILT_IN = ("torch", "jax", "keras", "huggingface", "joblib", "sklearn")


def installed() -> list[str]:
    """The plugin factories available as `sky.plugins.NAME`: skyhive's own and entry points."""
    from importlib.metadata import entry_points  # (on use: reading every package's metadata is slow)

    return sorted({*_BUILT_IN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def __getattr__(name: str) -> Any:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            factory = ep.load()
            globals()[name] = factory
            return factory
    raise AttributeError(f"skyhive.plugins has no plugin {name!r} (installed: {', '.join(installed())})")
