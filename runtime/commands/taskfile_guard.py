"""The file-level checks of a task file, before and while YAML reads it: what kind of file it is, its
size, its encoding, how deep it nests.

A task file is a small text file a person wrote (or a program generated). What is not — a device or a
pipe, a 64 MB file, binary data, UTF-16, brackets nested 10,000 deep — is refused at once with one
line naming the file and what is wrong (`TaskFileError`, exit 2), never a traceback, a minute of
parsing or "maximum recursion depth". YAML tags that build Python objects are refused by the safe
loader (the parser turns that into the same kind of error); nothing in a task file is ever executed
while it is read.
"""

from __future__ import annotations

import os
import stat

import yaml
from yaml.nodes import Node

from ...errors import TaskFileError

__all__ = ["MAX_TASK_FILE_BYTES", "MAX_DEPTH", "read_task_text", "BoundedLoader"]

#: The largest task file read (SkyPilot's are a few KiB: scripts and lists of mounts, never data).
MAX_TASK_FILE_BYTES = 1 << 20
#: How deep mappings and lists may nest (a task file has 3 or 4 levels; PyYAML's composer recurses
#: per level and fails with RecursionError somewhere past ~300).
MAX_DEPTH = 64

_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),  # before UTF-16: same first bytes
    (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"),
)


def read_task_text(path: str | os.PathLike[str]) -> str:
    """The text of task file `path`, checked: a regular file of at most `MAX_TASK_FILE_BYTES`, UTF-8
    (a UTF-8 byte-order mark is allowed) with no NUL byte. Raises `TaskFileError` naming the file."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TaskFileError(f"{where}: not a regular file (a task file is a YAML text file)")
            if info.st_size > MAX_TASK_FILE_BYTES:
                raise TaskFileError(f"{where}: {_size(info.st_size)} is too large for a task file (at most "
                                    f"{_size(MAX_TASK_FILE_BYTES)}; data goes in workdir or file_mounts)")
            data = fh.read(MAX_TASK_FILE_BYTES + 1)
    except OSError as exc:
        raise TaskFileError(f"cannot read task file {where}: {exc.strerror or exc}") from None
    if len(data) > MAX_TASK_FILE_BYTES:  # it grew while we looked
        raise TaskFileError(f"{where}: too large for a task file (at most {_size(MAX_TASK_FILE_BYTES)})")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise TaskFileError(f"{where}: the file is {encoding} text (it starts with a {encoding} byte-order "
                                f"mark); task files are UTF-8: save it as UTF-8")
    nul = data.find(b"\x00")
    if nul >= 0:
        hint = " (UTF-16 text without a byte-order mark? save it as UTF-8)" if _looks_utf16(data) else ""
        raise TaskFileError(f"{where}: a binary file, not YAML text: a NUL byte at offset {nul}{hint}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TaskFileError(f"{where}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                            f"(line {line}); task files are UTF-8") from None


def _looks_utf16(data: bytes) -> bool:
    head = data[:200]
    return len(head) >= 4 and (head[1::2].count(0) > len(head) // 4 or head[0::2].count(0) > len(head) // 4)


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing mappings and lists nested deeper than `MAX_DEPTH` (a
    `ComposerError` at the node that went too deep) instead of recursing until Python gives up."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels (a task "
                                                  f"file needs a few)", self.peek_event().start_mark)
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1
