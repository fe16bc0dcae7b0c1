"""A log file as the log pages read it: by byte ranges of whole lines — the end first, earlier parts on
demand (`backward`), what it gains as it grows (`forward`) — and every byte of it for a download.

A log still being written (its job has not ended) is read in whole lines only: its last line, until
its newline arrives, is left for the next read."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Part", "forward", "backward", "download", "CHUNK"]

#: Bytes of a log sent per request at most.
CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    data: bytes
    start: int  # where `data` begins in the file
    next: int  # where it ends (the offset to read forward from)
    size: int  # the file's size when read
    more: bool  # forward: more may follow at once; backward: there is more before `start`


def forward(path: Path, offset: int, finished: bool, *, chunk: int = CHUNK) -> Part:
    """From byte `offset`: whole lines (the rest too once `finished`), at most `chunk` bytes. A line
    longer than a chunk goes a chunk at a time."""
    offset = max(0, offset)
    data, size = b"", 0
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(offset)
        data = fh.read(chunk)
    more = len(data) == chunk
    if (more or not finished) and b"\n" in data:
        data = data[: data.rfind(b"\n") + 1]
    elif not finished and not more:  # (a line of a whole chunk goes as it is)
        data = b""
    return Part(data, offset, offset + len(data), size, more)


def backward(path: Path, before: int, finished: bool, *, chunk: int = CHUNK) -> Part:
    """The whole lines that end at byte `before` (-1: the end of the file; a line not ended yet of a log
    still written is left out), at most `chunk` bytes; `start` is where they begin, `more` whether
    anything comes before it."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return Part(b"", 0, 0, 0, False)
    with fh:
        size = fh.seek(0, 2)
        end = size if before < 0 else min(before, size)
        if not finished and end == size:
            look = max(0, end - chunk)
            fh.seek(look)
            cut = fh.read(end - look).rfind(b"\n")
            end = look + cut + 1 if cut >= 0 else look
        start = max(0, end - chunk)
        fh.seek(start)
        data = fh.read(end - start)
    if start > 0:
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:  # begin at a line's start (a line longer than a chunk: its end part)
            start, data = start + cut + 1, data[cut + 1:]
    return Part(data, start, end, size, start > 0)


def download(path: Path, finished: bool, redact: Callable[[str], str] | None = None) -> Iterator[bytes]:
    """Every byte of the log (of a log still written, up to its last whole line), a chunk at a time;
    with `redact`, each chunk's text through it (bytes that are not UTF-8 kept as they are)."""
    offset = 0
    while True:
        part = forward(path, offset, finished)
        if part.data:
            if redact is None:
                yield part.data
            else:
                yield redact(part.data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        offset = part.next
        if not part.more or not part.data:
            return
