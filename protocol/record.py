"""`Record`: `==`, `hash()` and `repr()` of a frozen dataclass, written once.

`@dataclass` generates and compiles `__eq__`, `__hash__` and `__repr__` for every class it makes
(`exec` of generated source, which no bytecode cache keeps): for the protocol's messages and the
pool's events that was a third of defining each class, paid by every worker's start and every
client's import. Classes declared ``@dataclass(frozen=True, slots=True, kw_only=True, eq=False,
repr=False)`` on top of `Record` get the same three methods from here:

- ``a == b``: same class (exactly) and equal fields, in order; else `NotImplemented`;
- ``hash(a)``: the hash of the tuple of its fields (a frozen dataclass's);
- ``repr(a)``: ``Name(field=value, ...)``, a record inside itself shown as ``...``.

Fields declared with ``compare=False``, ``hash=False`` or ``repr=False`` are left out of each as
`dataclasses` would.
"""

from __future__ import annotations

import threading
from dataclasses import fields
from typing import Any

__all__ = ["Record"]

#: class -> (compared fields, hashed fields, shown fields)
_NAMES: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}
_showing = threading.local()


def _names(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    names = _NAMES.get(cls)
    if names is None:
        fs = fields(cls)
        names = _NAMES[cls] = (
            tuple(f.name for f in fs if f.compare),
            tuple(f.name for f in fs if (f.compare if f.hash is None else f.hash)),
            tuple(f.name for f in fs if f.repr),
        )
    return names


class Record:
    """Base of the frozen dataclasses whose `==`, `hash()` and `repr()` are these (see the module)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _names(self.__class__)[0]  # (tuples: `is` before `==` per field, as dataclasses compare)
        return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in _names(self.__class__)[1]))

    def __repr__(self) -> str:
        key = id(self)
        showing = _showing.__dict__.setdefault("ids", set())
        if key in showing:
            return "..."
        showing.add(key)
        try:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _names(self.__class__)[2])
        finally:
            showing.discard(key)
        return f"{self.__class__.__qualname__}({shown})"

