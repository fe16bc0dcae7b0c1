"""The spellings of values shared by task files and command-line options: environment overrides
(`K=V`, a bare `K` from this environment), SkyPilot's `8`/`8+` amounts, and `NAME[:COUNT]` accelerators."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ...errors import TaskFileError

__all__ = ["ENV_NAME", "TASK_NAME", "NAME_RULE", "check_task_name", "parse_env_overrides", "parse_amount", "parse_accelerators",
           "accelerator_share"]

#: A valid environment variable name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: A task's name (the task file's `name`, `-n/--name`), which also names a managed job: it names files and
#: pools (`<name>-job<ID>-<attempt>`), so it is a plain file name, short enough to leave room for those.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
NAME_RULE = "a letter or digit, then letters, digits, '.', '_' or '-', at most 63 characters in all"


def check_task_name(value: str, where: str) -> str:
    """`value` when it is a task's name (`TASK_NAME`), else `TaskFileError` saying `where` and the rule."""
    if not TASK_NAME.match(value):
        raise TaskFileError(f"{where} {value!r}: a name is {NAME_RULE} (it names files and pools)")
    return value


_ACCEL = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)(?::(\d+(?:\.\d+)?|\.\d+))?\Z")


def parse_env_overrides(items: list[str], environ: Mapping[str, str] | None = None, *,
                        flag: str = "--env") -> dict[str, str]:
    """`--env K=V` options (a bare `--env K` takes K from this environment), as a dict. With
    `flag="--secret"`, messages never show a value and an empty value is refused (it could not be redacted)."""
    environ = os.environ if environ is None else environ
    secret = flag == "--secret"
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not ENV_NAME.match(key):
            shown = f"{key}=***" if secret and sep else item
            raise TaskFileError(f"{flag} {shown}: {key!r} is not a valid environment variable name")
        if not sep:
            if key not in environ:
                raise TaskFileError(f"{flag} {key}: no value given and {key} is not set here")
            value = environ[key]
        if secret and not value:
            raise TaskFileError(f"{flag} {key}: the value is empty (an empty secret cannot be redacted)")
        out[key] = value
    return out


_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*(GB|G|GiB)?\s*(\+?)\Z", re.IGNORECASE)


def parse_amount(raw: object, *, memory: bool = False) -> tuple[float, bool]:
    """SkyPilot's `8` (exactly 8) / `8+` (at least 8) for cpus, and for memory in GB (an optional "GB"
    suffix): (value, or_more). Raises `ValueError` saying what is expected."""
    text = str(raw).strip() if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
    m = _AMOUNT.match(text) if text is not None else None
    if m is None or float(m.group(1)) <= 0 or (m.group(2) and not memory):
        expected = "a memory size in GB like 32 or 32+" if memory else "a CPU count like 8 or 8+"
        raise ValueError(f"expected {expected}, got {raw!r}")
    return float(m.group(1)), bool(m.group(3))


def parse_accelerators(raw: object) -> tuple[str, int]:
    """`L4`, `L4:2` (or SkyPilot's `{L4: 2}`) -> ("L4", 2). A fractional count under 1 (SkyPilot's
    `L4:0.5`, a share of one GPU) asks for one such GPU on the node: ("L4", 1) — skyhive runs one job
    at a time on a node, so the share is the whole GPU. Raises `ValueError` saying what is expected."""
    if isinstance(raw, dict) and len(raw) == 1:
        ((name, count),) = raw.items()
        raw = f"{name}:{count}" if count is not None else str(name)
    m = _ACCEL.match(raw.strip()) if isinstance(raw, str) else None
    if m is None:
        raise ValueError(f"expected NAME or NAME:COUNT like L4:2 or L4:0.5, got {raw!r}")
    count = float(m.group(2)) if m.group(2) is not None else 1.0
    if count <= 0:
        raise ValueError(f"the accelerator count must be more than 0, got {m.group(2)}")
    if count > 1 and not count.is_integer():
        raise ValueError(f"a fractional accelerator count must be under 1 (a share of one GPU), got {m.group(2)}")
    return m.group(1), max(1, int(count))


def accelerator_share(raw: object) -> float:
    """The share of one GPU that `raw` asks (`L4:0.5` -> 0.5; the first of a list of candidates, as the
    task file takes it); 0.0 when it asks whole GPUs, none, or is malformed (`parse_accelerators` says
    why). What a named pool's job queue counts, so that two half-GPU jobs run side by side."""
    if isinstance(raw, (list, set)) and raw:
        raw = sorted(map(str, raw))[0] if isinstance(raw, set) else raw[0]
    if isinstance(raw, dict) and len(raw) == 1:
        ((name, count),) = raw.items()
        raw = f"{name}:{count}" if count is not None else str(name)
    m = _ACCEL.match(raw.strip()) if isinstance(raw, str) else None
    if m is None or m.group(2) is None:
        return 0.0
    count = float(m.group(2))
    return count if 0 < count < 1 else 0.0
