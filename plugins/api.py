"""The plugin API: a plugin is a small object with optional hooks.

- `transform(image, pool) -> image` — client side, before the nodes are set up: add pip packages,
  indexes, environment variables (use the `Image.with_*` helpers so plugins do not clobber each other).
- `around_client(pool)` — client side, a context manager for the pool's lifetime.
- `around_app(info)` — on the worker, a context manager entered once per worker process before its
  first task and exited at shutdown (set up a process group in it, tear it down in its `finally`).
- `around_task(info)` — on the worker, a context manager around each task.

Hooks run in the order the plugins are listed. A plugin is pickled to the workers, so keep it a plain
object and import heavy frameworks (torch, jax) inside the worker-side hooks only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..protocol.info import InstanceInfo as InstanceInfo

__all__ = ["Plugin", "InstanceInfo", "apply_transforms"]


class Plugin:
    """Optional base class; any object with some of the hook methods is a plugin."""

    name: str = "plugin"

    def __repr__(self) -> str:
        return f"<plugin {self.name}>"


def apply_transforms(plugins: Sequence[Any], image: Any, pool: Any) -> Any:
    """Run every plugin's `transform` in order, starting from `image` (an empty `Image` if None)."""
    from .image import Image

    image = image if image is not None else Image()
    for plugin in plugins:
        transform = getattr(plugin, "transform", None)
        if transform is not None:
            image = transform(image, pool)
            if not isinstance(image, Image):
                raise TypeError(f"{plugin!r}.transform() must return an Image, got {type(image).__name__}")
    return image
