"""A job's log file as the nodes write it (a named pool's queue agent, `agent.py`; a managed job's
controller, `managed/controller.py`)."""

from __future__ import annotations

from typing import IO

__all__ = ["JobLog"]


class JobLog:
    """The job's log file: what the nodes wrote, "[node N] " before each line when there are several.
    With several nodes only whole lines are written (a node's unfinished line waits for its end, or
    for the job's next note), so one node's line is never cut by another's."""

    def __init__(self, fh: IO[str], prefix: bool) -> None:
        self.fh = fh
        self.prefix = prefix
        self.partial: dict[tuple[int, int, str], str] = {}

    def write(self, node: int, rank: int, stream: str, text: str) -> None:
        if self.prefix:
            key = (node, rank, stream)
            lines = (self.partial.pop(key, "") + text).splitlines(keepends=True)
            if lines and not lines[-1].endswith(("\n", "\r")):
                self.partial[key] = lines.pop()
            text = "".join(f"[node {node}] {line}" for line in lines)
            if not text:
                return
        self.fh.write(text)
        self.fh.flush()

    def flush_partial(self) -> None:
        """Write the lines the nodes left unfinished, each ended."""
        for (node, _, _), line in sorted(self.partial.items()):
            self.fh.write(f"[node {node}] {line}\n")
        self.partial.clear()
        self.fh.flush()

    def note(self, text: str) -> None:
        self.flush_partial()
        self.fh.write(f"[skyhive] {text}\n")
        self.fh.flush()
