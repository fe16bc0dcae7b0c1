"""Output selections: which nodes' output to keep ("all", "head", an index, a tuple, a predicate, None).

Shared by the client's `output=` option and the worker-side `@sky.stdout(only=...)` decorators; kept
free of the client's machinery so that workers can import it cheaply.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # (not imported with `sky.Pool`: the protocol package comes with the pool's start)
    from ...protocol.info import InstanceInfo

__all__ = ["OutputSpec", "selector"]

OutputSpec = Union[str, int, tuple[int, ...], Callable[["InstanceInfo"], bool], None]

_FORMS = ("'all', 'head', None, a node index, a tuple of node indexes, "
          "or a predicate taking InstanceInfo (e.g. lambda info: info.node < 2)")


def _everyone(info: InstanceInfo) -> bool:
    return True


def _nobody(info: InstanceInfo) -> bool:
    return False


def _head(info: InstanceInfo) -> bool:
    return info.is_head


def selector(spec: OutputSpec, *, where: str = "output") -> Callable[[InstanceInfo], bool]:
    """A predicate on `InstanceInfo` for an output selection.

    "all" keeps every node, None none, "head" node 0, an int that node, a tuple those nodes, and a
    callable is used as the predicate itself. Raises `ValueError` naming `where` for anything else
    (a bool, a list, a negative index, another string).
    """
    if spec is None:
        return _nobody
    if isinstance(spec, str):
        if spec == "all":
            return _everyone
        if spec == "head":
            return _head
        raise ValueError(f"{where}={spec!r} is not an output selection: use {_FORMS}")
    if isinstance(spec, bool):
        raise ValueError(f"{where}={spec!r}: use 'all' or None, not a bool")
    if isinstance(spec, tuple):
        nodes = frozenset(_index(i, where, spec) for i in spec)
        return lambda info: info.node in nodes
    if callable(spec):
        return spec
    if isinstance(spec, (list, set, frozenset, range)):
        raise ValueError(f"{where}={spec!r}: pass the node indexes as a tuple, e.g. {where}=(0, 2)")
    node = _index(spec, where, spec)
    return lambda info: info.node == node


def _index(value: object, where: str, spec: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{where}={spec!r}: node indexes are ints, not bools")
    try:
        node = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{where}={spec!r} is not an output selection: use {_FORMS}") from None
    if node < 0:
        raise ValueError(f"{where}={spec!r}: node indexes count from 0, got {node}")
    return node
