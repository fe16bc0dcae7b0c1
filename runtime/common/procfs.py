"""Reading /proc: the one place that parses a process's stat line (Linux)."""

from __future__ import annotations

__all__ = ["proc_stat", "group_members"]


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...), or None if gone.

    The command name is skipped by its closing parenthesis, so a name with spaces or parentheses
    cannot shift the fields.
    """
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_members(pgrp: int, *, but: int = 0) -> list[int]:
    """The live (not zombie) processes of process group `pgrp`, `but` that one."""
    import os

    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != but:
            stat = proc_stat(int(entry))
            if stat is not None and stat[0] != "Z" and int(stat[2]) == pgrp:
                out.append(int(entry))
    return out
