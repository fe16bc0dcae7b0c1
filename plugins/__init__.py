"""Plugins: what a pool sets up on its nodes besides your function.

    sky.Pool(..., plugins=[sky.plugins.torch()])                          # DDP, process group ready
    sky.Pool(..., plugins=[sky.plugins.jax(), sky.plugins.keras("jax")])  # Keras across processes
    sky.Pool(..., plugins=[sky.plugins.huggingface(token=...)])           # libraries + secret token
    sky.Pool(..., plugins=[sky.plugins.sklearn()])                        # n_jobs=-1 runs on the pool

Each factory returns a small plain object with the hooks of `skyhive.plugins.api` (any object with
those hooks is a plugin too). None of these modules imports torch, jax or keras: that happens on the
workers, inside the hooks. See docs/plugins.md.
"""

from __future__ import annotations

from .api import InstanceInfo as InstanceInfo
from .api import Plugin as Plugin
from .api import apply_transforms as apply_transforms
from .huggingface import huggingface as huggingface
from .jax import jax as jax
from .joblib import joblib as joblib
from .joblib import sklearn as sklearn
from .keras import keras as keras
from ..errors import WorkerRestarted as WorkerRestarted
from .torch import torch as torch

__all__ = ["Plugin", "InstanceInfo", "apply_transforms", "torch", "jax", "keras", "huggingface",
           "joblib", "sklearn", "WorkerRestarted"]
