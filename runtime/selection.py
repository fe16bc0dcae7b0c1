"""Output selections: which nodes' output to keep ("all", "head", an index, a tuple, a predicate, None).

Shared by the client's `output=` option and the worker-side `@sky.stdout(only=...)` decorators; kept
free of the client's machinery so that workers can import it cheaply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

from ..protocol.info import InstanceInfo

__all__ = ["OutputSpec", "selector"]

OutputSpec = Union[str, int, tuple[int, ...], Callable[[InstanceInfo], bool], None]


def selector(spec: OutputSpec, *, where: str = "output") -> Callable[[InstanceInfo], bool]:
    """A predicate on `InstanceInfo` for an output selection; `ValueError` for a bad one."""
    if spec is None:
        return lambda info: False
    if spec == "all":
        return lambda info: True
    if spec == "head":
        return lambda info: info.is_head
    if isinstance(spec, bool):
        raise ValueError(f"{where}={spec!r}: use 'all' or None, not a bool")
    if isinstance(spec, int):
        return lambda info: info.node == spec
    if isinstance(spec, tuple) and all(isinstance(i, int) and not isinstance(i, bool) for i in spec):
        nodes = frozenset(spec)
        return lambda info: info.node in nodes
    if callable(spec):
        return spec
    raise ValueError(
        f"{where}={spec!r} is not an output selection: use 'all', 'head', None, a node index, "
        "a tuple of node indexes, or a predicate taking InstanceInfo"
    )
