"""`TerminalPrinter`: task output on the caller's terminal, as `[node N] text` lines.

Kept apart from the router (`router.py`), which decides where output goes; this decides how it looks.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from ...protocol.messages import STDERR

__all__ = ["TerminalPrinter", "PARTIAL_DELAY", "PROGRESS_EVERY", "MAX_PARTIAL"]

#: A partial line (no newline yet) is printed once it has waited this long.
PARTIAL_DELAY = 0.25
#: Off a terminal, a line that rewrites itself with "\r" (a progress bar) is printed at most this often.
PROGRESS_EVERY = 5.0
#: A partial line longer than this is printed as a line of its own (bounds what is held back).
MAX_PARTIAL = 64 * 1024
_COLORS = ("36", "33", "35", "32", "34", "31", "96", "93", "95", "92", "94", "91")



def no_color() -> bool:
    """True when the user asked for no colours: NO_COLOR set and not empty (https://no-color.org)."""
    return bool(os.environ.get("NO_COLOR"))

class _Partial:
    __slots__ = ("text", "since", "shown_at")

    def __init__(self, text: str, since: float, shown_at: float = -1.0) -> None:
        self.text = text  # the line so far, from its last "\r" rewrite on
        self.since = since  # when it changed and was not shown since; -1: shown as it is
        self.shown_at = shown_at  # when it was last shown (rate-limits progress bars)


class TerminalPrinter:
    """Prints output lines as `[node N] text` (colored per node on a terminal).

    A line that rewrites itself with carriage returns (a progress bar) is printed as its last
    rewrite. A partial line is held until its newline comes, or for `PARTIAL_DELAY`: then a terminal
    shows it in place and redraws it as it changes; a file or pipe gets it as a line of its own. A
    progress bar is started on a new line at most every `PROGRESS_EVERY` seconds (several bars at
    once take turns), so it never floods. `stdout`/`stderr` default to the caller's `sys.stdout` /
    `sys.stderr` at the time of writing.
    """

    def __init__(self, *, multi_process: bool, stdout: TextIO | None = None, stderr: TextIO | None = None,
                 enabled: bool = True) -> None:
        self._multi = multi_process
        self._stdout = stdout
        self._stderr = stderr
        self._enabled = enabled
        self._partials: dict[tuple[int, int, int], _Partial] = {}
        self._open: tuple[int, int, int] | None = None  # a terminal shows this key's partial line

    @property
    def pending(self) -> bool:
        """Partial lines are held (the router then calls `tick` every so often)."""
        return bool(self._partials)

    def _out(self, stream: int) -> TextIO:
        if stream == STDERR:
            return self._stderr if self._stderr is not None else sys.stderr
        return self._stdout if self._stdout is not None else sys.stdout

    def _prefix(self, node: int, rank: int, tty: bool) -> str:
        label = f"node {node}.{rank}" if self._multi else f"node {node}"
        if tty and not no_color():
            return f"\x1b[{_COLORS[node % len(_COLORS)]}m[{label}]\x1b[0m "
        return f"[{label}] "

    def feed(self, node: int, rank: int, stream: int, text: str, now: float) -> None:
        """Print the complete lines of `text` (after what was held for this stream); hold the rest."""
        if not self._enabled:
            return
        key = (node, rank, stream)
        partial = self._partials.pop(key, None)
        if partial is not None:
            text = partial.text + text
        lines, newline, rest = text.rpartition("\n")
        if newline:
            self._lines(key, lines + "\n")
            partial = None
        if rest:
            rest = _last_rewrite(rest)
            if len(rest) > MAX_PARTIAL:
                self._lines(key, _collapse(rest) + "\n")
            elif partial is None:
                self._partials[key] = _Partial(rest, now)
            else:  # the same line goes on: it is due `PARTIAL_DELAY` after it first went unshown
                since = partial.since if partial.since >= 0 else now
                self._partials[key] = _Partial(rest, since, partial.shown_at)

    def _lines(self, key: tuple[int, int, int], block: str) -> None:
        """Print complete lines (`block` ends with a newline), rewriting the line on screen if it is
        this key's."""
        node, rank, stream = key
        out = self._out(stream)
        tty = _isatty(out)
        if "\r" in block:
            block = "\n".join([_collapse(line) for line in block[:-1].split("\n")]) + "\n"
        prefix = self._prefix(node, rank, tty)
        text = prefix + block[:-1].replace("\n", "\n" + prefix) + "\n"
        if self._open == key:
            self._open = None
            text = "\r\x1b[K" + text
        else:
            self._close_open(out)
        out.write(text)
        out.flush()

    def _close_open(self, out: TextIO) -> None:
        """End the line a terminal shows without its newline, before printing anything else there."""
        if self._open is None:
            return
        key, self._open = self._open, None
        other = self._out(key[2])
        other.write("\n")
        if other is not out:
            other.flush()
        partial = self._partials.pop(key, None)
        if partial is not None:  # shown: what follows is printed as a continuation
            self._consumed(key, partial)

    def _consumed(self, key: tuple[int, int, int], partial: _Partial) -> None:
        if "\r" in partial.text:  # a progress bar: remember when it was shown, to rate-limit it
            self._partials[key] = _Partial("\r", -1.0, partial.shown_at)

    def tick(self, now: float) -> None:
        """Show the partial lines that waited `PARTIAL_DELAY` unchanged-and-unshown."""
        if not self._enabled:
            self._partials.clear()
            return
        for key, partial in list(self._partials.items()):
            if partial.since < 0 or now - partial.since < PARTIAL_DELAY:
                continue
            node, rank, stream = key
            out = self._out(stream)
            tty = _isatty(out)
            line = _collapse(partial.text)
            if tty and self._open == key:  # redraw in place
                out.write("\r\x1b[K" + self._prefix(node, rank, True) + line)
            else:
                if "\r" in partial.text and partial.shown_at >= 0 and now - partial.shown_at < PROGRESS_EVERY:
                    continue  # a progress bar that had its turn recently
                self._close_open(out)
                if key not in self._partials:
                    continue
                if tty:
                    out.write(self._prefix(node, rank, True) + line)
                    self._open = key
                else:
                    out.write(self._prefix(node, rank, False) + line + "\n")
                    del self._partials[key]
                    partial.shown_at = now
                    self._consumed(key, partial)
            partial.since = -1.0
            partial.shown_at = now
            out.flush()

    def end(self, node: int, rank: int) -> None:
        """A task of this worker ended: print its partial lines as lines."""
        if not self._partials:  # (every call ends here; most printed nothing, or whole lines)
            return
        for stream in (1, STDERR):
            key = (node, rank, stream)
            partial = self._partials.get(key)
            if partial is None:
                continue
            line = _collapse(partial.text)
            if line or self._open == key:
                self._lines(key, line + "\n")
            self._partials.pop(key, None)

    def end_all(self) -> None:
        for node, rank, _ in list(self._partials):
            self.end(node, rank)


def _isatty(out: TextIO) -> bool:
    try:
        return bool(out.isatty())
    except Exception:
        return False


def _collapse(line: str) -> str:
    """What a terminal shows for `line`: the text after its last carriage return (CRLF is one end)."""
    if "\r" not in line:
        return line
    line = line.rstrip("\r")
    return line[line.rfind("\r") + 1 :]


def _last_rewrite(text: str) -> str:
    """`text` from its last carriage return that is followed by text (what is worth holding)."""
    i = text.rstrip("\r").rfind("\r")
    return text[i:] if i > 0 else text
