"""`instance_info()`: the answer to "where am I?" inside a task."""

from __future__ import annotations

import os

from ...errors import NotOnNodeError
from ...protocol.info import ENV_VAR, InstanceInfo

__all__ = ["instance_info", "set_instance_info", "current_instance_info", "NotOnNodeError"]

_current: InstanceInfo | None = None
#: the `COMPUTE_POOL` text last parsed and what it gave (a worker parses its own on first use)
_parsed: tuple[str, InstanceInfo] | None = None


def set_instance_info(info: InstanceInfo | None) -> None:
    """Set this process's `InstanceInfo` (called by the worker daemon at start-up)."""
    global _current
    _current = info


def current_instance_info() -> InstanceInfo | None:
    """What `set_instance_info` set last in this process (None: nothing; the environment not read)."""
    return _current


def instance_info() -> InstanceInfo:
    """This worker's `InstanceInfo`.

    Inside a task it is the worker's own; in a child process a task started, it is read from the
    `COMPUTE_POOL` environment variable. Raises `NotOnNodeError` anywhere else.
    """
    if _current is not None:
        return _current
    global _parsed
    text = os.environ.get(ENV_VAR)
    if text:
        if _parsed is None or _parsed[0] != text:
            _parsed = (text, InstanceInfo.from_json(text))
        return _parsed[1]
    raise NotOnNodeError(
        "instance_info() only works inside a function running on a skyhive node "
        f"(no worker context here, and ${ENV_VAR} is not set)"
    )
