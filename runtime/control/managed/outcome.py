"""How one attempt of a managed job ended (`Outcome`) and when it stopped (`Stop`): what the
controller (controller.py) decides on, and what the attempt after a lost one waits for."""

from __future__ import annotations

from typing import Any

import anyio

from ..steps import NodeExit

__all__ = ["Outcome", "Stop"]


class Outcome:
    """One attempt's end: "ok" | "lost" | "error" | "cancelled" | "broken" | "unneeded", the failure, why,
    the lost nodes' handles (what the next attempt avoids); "unneeded": an attempt started on its
    predecessor's interruption notice whose predecessor then ended the job (`previous`: how)."""

    def __init__(self, kind: str, failed: NodeExit | None = None, why: str = "", lost: tuple[Any, ...] = (),
                 previous: Outcome | None = None, capacity: bool = False) -> None:
        self.kind, self.failed, self.why, self.lost, self.previous = kind, failed, why, lost, previous
        self.capacity = capacity  # "broken" because no place had room for its nodes: tried again later


class Stop:
    """An attempt stopped (`event`: nothing of it runs any more) and how it ended (`outcome`, None if
    it never said: its task was cancelled) — what the attempt after it waits for before its steps."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.outcome: Outcome | None = None
