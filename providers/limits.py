"""How many nodes one pool may ask of a provider: refused at once, before anything is created.

Without a bound, `Pool(nodes=10**9)` built a billion node records (and a task file's `num_nodes` the
same) for minutes before any provider was asked. Each provider says its most (`Provider.max_nodes`);
the default is `DEFAULT_MAX_NODES`, or what `SKYHIVE_MAX_NODES` in the environment configures.
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["DEFAULT_MAX_NODES", "ENV_MAX_NODES", "configured_max_nodes", "check_node_count"]

#: The most nodes one pool may have when neither its provider nor the environment says otherwise.
DEFAULT_MAX_NODES = 10_000
#: The environment variable that configures another bound (a positive whole number).
ENV_MAX_NODES = "SKYHIVE_MAX_NODES"


def configured_max_nodes(default: int = DEFAULT_MAX_NODES) -> int:
    """`SKYHIVE_MAX_NODES` when set, else `default`. Raises `ValueError` for a value that is not a
    positive whole number, naming the variable."""
    raw = os.environ.get(ENV_MAX_NODES, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV_MAX_NODES}={raw!r}: need a positive whole number of nodes")
    return value


class _Bounded(Protocol):
    """What the check reads of a provider (`Provider.name`, `Provider.max_nodes`)."""

    @property
    def name(self) -> str: ...

    @property
    def max_nodes(self) -> int: ...


def check_node_count(provider: _Bounded, nodes: int, what: str) -> None:
    """Raise `ValueError` naming `what` (e.g. "Pool(nodes=...)") and the limit when `nodes` is more
    than `provider` allows one pool."""
    limit = provider.max_nodes
    if nodes > limit:
        raise ValueError(f"{what}: {nodes} nodes is more than the {provider.name} provider allows one pool "
                         f"({limit}; {ENV_MAX_NODES} configures another bound)")
