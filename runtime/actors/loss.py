"""What a lost worker means to its pool, declared once: `LossPolicy`, and the default `RestartInPlace`.

A node's supervisor (`node.py`) asks its pool's policy each time one of its workers is lost; the other
policy, `ReplaceFailed` (`Pool(replace_failed=True)`), is in `replace.py` with the whole story.
"""

from __future__ import annotations

import abc
from typing import Protocol

__all__ = ["LossPolicy", "RestartInPlace", "LostNode"]


class LostNode(Protocol):
    """The node actor, as a loss policy sees it."""

    index: int


class LossPolicy(abc.ABC):
    """Asked by a node's supervisor each time one of its workers is lost (see the module docstring)."""

    @abc.abstractmethod
    def note(self, node: LostNode) -> str:
        """Text added to the `WorkerLost` of the calls that were on the lost worker ('' for none)."""

    @abc.abstractmethod
    def take_over(self, node: LostNode, rank: int, reason: str, cause: BaseException | None) -> bool:
        """True: the pool takes the node over (replaces it) and its supervisor stops; False: the
        supervisor restarts the worker in place, as by default."""

    def replacing(self, index: int | None = None) -> bool:
        """Whether a replacement is under way (of node `index`, or of any node): calls then wait for
        it instead of failing."""
        return False

    async def aclose(self) -> None:
        """Stop what is under way (the pool is closing); bounded, never raises."""


class RestartInPlace(LossPolicy):
    """The default: a lost worker is restarted on its node by the node's supervisor."""

    def note(self, node: LostNode) -> str:
        return ""

    def take_over(self, node: LostNode, rank: int, reason: str, cause: BaseException | None) -> bool:
        return False
