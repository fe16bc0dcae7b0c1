"""`skyhive.api`: the public names under the module Skyward's programs import them from
(`from skyward.api import Worker, Spec, Image, Pool, ...`). The same objects as `skyhive.NAME`, imported
on first use; Skyward's names with no skyhive counterpart are not here (`AttributeError` names the one
asked for)."""

from __future__ import annotations

from typing import Any

_NAMES = ("Worker", "Options", "Spec", "Image", "PipIndex", "Pool", "ComputePool", "Compute", "InstanceInfo", "instance_info",
          "shard", "stdout", "stderr", "silent", "function", "gather", "sky", "PendingFunction")
_PLUGIN_API = {"Plugin": "skyhive.plugins.api"}

__all__ = sorted([*_NAMES, *_PLUGIN_API])


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        import skyhive

        value = getattr(skyhive, name)
    elif name in _PLUGIN_API:
        from importlib import import_module

        value = getattr(import_module(_PLUGIN_API[name]), name)
    else:
        raise AttributeError(f"module 'skyhive.api' has no attribute {name!r} (skyhive.api has: {', '.join(__all__)})")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
