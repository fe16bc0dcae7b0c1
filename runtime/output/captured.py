"""`Captured`: a result together with the output its task wrote (`capture=True`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ...protocol.messages import STDERR

__all__ = ["Captured"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Captured(Generic[T]):
    """What a call with `capture=True` returns: the value, and the task's stdout and stderr text."""

    value: T
    stdout: str
    stderr: str
    node: int
    local_rank: int = 0

    @classmethod
    def from_outputs(cls, value: Any, outputs: list[tuple[int, str]], *, node: int, local_rank: int) -> Captured[Any]:
        out = "".join(t for s, t in outputs if s != STDERR)
        err = "".join(t for s, t in outputs if s == STDERR)
        return cls(value, out, err, node, local_rank)
