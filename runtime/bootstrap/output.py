"""Reading the node-side bootstrap script's output (`script.py`'s line protocol), for the Local and the
SSH bootstrap alike: `::step NAME` as a step starts, `::cached` when the directory was already complete,
`::done JSON` at the end, `::error STEP: MESSAGE` before a non-zero exit — followed by the failing
command's last lines, which belong to the error. Every other line is the running command's output;
pip's own progress lines in it (`Collecting torch==2.3.0`, `Downloading ...`, `Installing collected
packages: ...`) are reported as sub-steps (`pip: collecting torch==2.3.0`), so a long build shows which
package it is at, and a build stopped for taking too long can name it. No I/O here: the caller feeds
lines as they arrive."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

__all__ = ["ScriptOutput"]

log = logging.getLogger(__name__)

# pip's lines that say which package it is at (pip prints them at column 0 or indented by two)
_PIP_PROGRESS = re.compile(r"^\s{0,2}(Collecting|Processing|Downloading|Building wheel for|"
                           r"Installing collected packages:)\s+(\S.*?)\s*$")


class ScriptOutput:
    """The state of one run of the script, fed line by line (already redacted by the caller)."""

    def __init__(self, on_step: Callable[[str], None], *, where: str, keep: int = 200) -> None:
        self.on_step = on_step
        self.where = where
        self.keep = keep
        self.step = "start"  # the step running (or that failed)
        self.cached = False
        self.error = ""  # the ::error line and the lines after it
        self.lines: list[str] = []  # the last `keep` lines of ordinary output
        self.activity = ""  # within the step, what pip said it was at last ("collecting torch==2.3.0")

    def feed(self, line: str) -> None:
        if line.startswith("::step "):
            self.step = line[7:]
            self.activity = ""
            self.on_step(self.step)
        elif line == "::cached":
            self.cached = True
        elif line.startswith("::error "):
            self.error = line[8:]
        elif self.error:
            self.error += "\n" + line
        elif not line.startswith("::done"):
            self.lines.append(line)
            del self.lines[:-self.keep]
            log.debug("%s: %s", self.where, line)
            if self.step == "pip" and (m := _PIP_PROGRESS.match(line)):
                self.activity = f"{m[1].lower().rstrip(':')} {m[2]}"
                self.on_step(f"pip: {self.activity}")

    @property
    def at(self) -> str:
        """Where the script is (or stopped): the step, and what pip was doing in it if anything."""
        return f"{self.step!r} ({self.activity})" if self.activity else repr(self.step)

    def failure(self, exit_status: int | None) -> str:
        """What went wrong, for an exception: the error with its output, else the exit status and the
        last lines of output."""
        if self.error:
            return self.error
        return f"exit status {exit_status}" + "".join("\n" + ln for ln in self.lines[-30:])
