"""The checks `Pool(...)` makes on its arguments before anything is created.

Each bad value is a `TypeError` (wrong kind of thing) or `ValueError` (right kind, impossible value)
raised at construction, naming the argument as the caller wrote it: `Pool(image=5)` says so rather
than failing with an `AttributeError` when the pool opens, and a `heartbeat_timeout` of NaN (which no
comparison rejects) is refused instead of silently disabling the heartbeat clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .common.settings import check_settings

__all__ = ["check_pool_args", "check_nodes", "check_elastic", "POOL_NAME", "DEFAULT_IDLE_TIMEOUT"]

#: what a pool id may be: it names the pool's log file and, for a named pool, its directory
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")

#: How long a node of an elastic pool (`nodes=(min, max)`) may sit idle before it is given back (seconds).
DEFAULT_IDLE_TIMEOUT = 60.0


def check_nodes(nodes: Any, idle_timeout: Any = None,
                cooldown: Any = None) -> tuple[int, tuple[int, int, float, float] | None]:
    """`Pool(nodes=...)`, `autoscale_idle_timeout=` and `autoscale_cooldown=`: the nodes to start with,
    and for an elastic range `(min, max)` with min < max, `(min, max, idle_timeout, cooldown)` (else
    None). Raises naming the value."""
    for arg, value, least in (("autoscale_idle_timeout", idle_timeout, "positive"),
                              ("autoscale_cooldown", cooldown, "non-negative")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"Pool({arg}={value!r}): need a number of seconds, got {type(value).__name__}")
        if not (math.isfinite(value) and (value > 0 or (value == 0 and least == "non-negative"))):
            raise ValueError(f"Pool({arg}={value!r}): need a {least} number of seconds")
    if not isinstance(nodes, (tuple, list)):
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise ValueError(f"Pool(nodes={nodes!r}): need a positive number of nodes, or a range (min, max)")
        return nodes, None
    if len(nodes) != 2:
        raise ValueError(f"Pool(nodes={nodes!r}): a range is two whole numbers (min, max), got {len(nodes)} values")
    for end, value in zip(("min", "max"), nodes):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"Pool(nodes={nodes!r}): the range's {end} {value!r} is a {type(value).__name__}, "
                            "need whole numbers (min, max)")
    low, high = nodes
    if low < 1:
        raise ValueError(f"Pool(nodes={nodes!r}): the range's min is {low}: a pool starts with at least 1 node, "
                         "need 1 <= min <= max")
    if low > high:
        raise ValueError(f"Pool(nodes={nodes!r}): the range's min {low} is more than its max {high}, "
                         "need 1 <= min <= max")
    if low == high:
        return low, None  # a fixed size
    return low, (low, high, float(idle_timeout) if idle_timeout is not None else DEFAULT_IDLE_TIMEOUT,
                 float(cooldown or 0.0))


def check_elastic(elastic: tuple[int, int, float, float], *, min_nodes: Any, replace_failed: bool, keep: Any,
                   autostop: Any) -> None:
    """What an elastic range does not go with (yet), refused naming both."""
    shown = f"nodes=({elastic[0]}, {elastic[1]})"
    if min_nodes is not None:
        raise ValueError(f"Pool({shown}, min_nodes={min_nodes!r}): an elastic range starts with its min "
                         "already: drop min_nodes")
    if replace_failed:
        raise ValueError(f"Pool({shown}, replace_failed=True): an elastic pool does not replace lost nodes "
                         "(it grows again while calls wait): use a fixed number of nodes to replace them")
    if keep or autostop is not None:
        raise ValueError(f"Pool({shown}, keep=/autostop=): a kept (named) pool has a fixed number of nodes")


def check_pool_args(*, plugins: Any, image: Any, name: Any, log_events: Any, progress: Any, keep: Any,
                    autostop: Any, processes_per_node: Any, settings: Mapping[str, Any]) -> tuple[Any, ...]:
    """Raise `TypeError`/`ValueError` naming the first bad argument; the plugins as a tuple."""
    if isinstance(processes_per_node, bool):
        raise TypeError(f"Pool(processes_per_node={processes_per_node!r}): need a positive whole number")
    if image is not None:
        from ..plugins.image import Image  # (here: a pool without an Image never needs it)

        if not isinstance(image, Image):
            hint = " (an instance: sky.Image(...))" if image is Image else ""
            raise TypeError(f"Pool(image={image!r}): need a sky.Image{hint} or None, got {type(image).__name__}")
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"Pool(name={name!r}): need a str, got {type(name).__name__}")
        if not POOL_NAME.match(name):
            raise ValueError(f"Pool(name={name!r}): {name!r} cannot name a pool: use a letter or digit, then "
                             "letters, digits, '.', '_' or '-' (at most 128 characters): it names files")
    for arg, value in (("log_events", log_events), ("keep", keep)):
        if not isinstance(value, bool):
            raise TypeError(f"Pool({arg}={value!r}): need True or False")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"Pool(progress={progress!r}): need True, False or None")
    if autostop is not None:
        if isinstance(autostop, bool) or not isinstance(autostop, (int, float)):
            raise TypeError(f"Pool(autostop={autostop!r}): need a number of minutes or None, "
                            f"got {type(autostop).__name__}")
        if not (math.isfinite(autostop) and autostop > 0):
            raise ValueError(f"Pool(autostop={autostop!r}): need a positive number of minutes, or None")
    check_settings(settings, where="Pool")
    return _plugins(plugins)


def _plugins(plugins: Any) -> tuple[Any, ...]:
    if isinstance(plugins, (str, bytes, Mapping)) or not isinstance(plugins, Iterable):
        raise TypeError(f"Pool(plugins={plugins!r}): need a list of plugins (e.g. [sky.plugins.torch()]), "
                        f"got {type(plugins).__name__}")
    found = tuple(plugins)
    if not found:
        return found
    from ..plugins.api import AppHook, ClientHook, TaskHook, TransformHook  # (a pool without plugins: not imported)

    hooks = (TransformHook, AppHook, TaskHook, ClientHook)
    for i, plugin in enumerate(found):
        if isinstance(plugin, type):
            raise TypeError(f"Pool(plugins[{i}]={plugin.__name__}): pass an instance, "
                            f"{plugin.__name__}(...), not the class")
        if not isinstance(plugin, hooks):
            called = getattr(plugin, "__name__", None) if callable(plugin) else None
            hint = f" (call it: {called}(...))" if called else ""
            raise TypeError(f"Pool(plugins[{i}]={plugin!r}): not a plugin{hint}: a plugin has at least one of "
                            "transform, around_app, around_task, around_client (see skyhive.plugins)")
    return found
