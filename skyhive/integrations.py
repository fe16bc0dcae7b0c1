"""`sky.integrations`: the decorator form of the plugins, the oldest seeds' spelling.

    @sky.compute
    @sky.integrations.torch                # or @sky.integrations.torch(backend="gloo")
    def train(): ...                       # the process group is ready when the body runs

The decorator goes below `@sky.compute` (above it is a `TypeError` saying so: it would wrap the call
made on the client, not the function on the node, and set nothing up). On a node it enters the plugin's `around_app` hook the
first time a decorated function runs in that worker process, and keeps it for the process's life
(as `plugins=[sky.plugins.torch()]` on the pool does); if the pool already set the framework up
(the plugin on the pool too, or the user's own `init_process_group`), the hook sees that and leaves
it alone. Off a node (`fn.local()`, a plain call) the function just runs. The pool-level spelling
(`plugins=[...]`) is the primary one: it also adds the framework to the nodes' Image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .plugins.api import with_plugin
from .runtime.onnode.marked import refuse_above_compute
from .plugins.huggingface import huggingface as _huggingface
from .plugins.jax import jax as _jax
from .plugins.keras import keras as _keras
from .plugins.torch import torch as _torch

__all__ = ["torch", "jax", "keras", "huggingface"]


def _decorator(factory: Callable[..., Any], name: str) -> Callable[..., Any]:
    def decorate(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        plugin = factory(**options)

        def wrap(f: Callable[..., Any]) -> Any:
            refuse_above_compute(f, f"@sky.integrations.{name}")  # above it, it would set up nothing
            return with_plugin(plugin, f)

        return wrap if fn is None else wrap(fn)

    decorate.__name__ = decorate.__qualname__ = name
    decorate.__doc__ = (f"`@sky.integrations.{name}` or `@sky.integrations.{name}(**options)`: the "
                        f"options of `sky.plugins.{name}()`, set up on the node before the function runs.")
    return decorate


torch = _decorator(_torch, "torch")
jax = _decorator(_jax, "jax")
keras = _decorator(_keras, "keras")
huggingface = _decorator(_huggingface, "huggingface")
