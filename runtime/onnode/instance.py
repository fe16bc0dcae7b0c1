"""`instance_info()`: the answer to "where am I?" inside a task."""

from __future__ import annotations

import os

from ...errors import NotOnNodeError
from ...protocol.info import ENV_VAR, InstanceInfo

__all__ = ["instance_info", "set_instance_info", "current_instance_info", "NotOnNodeError"]

_current: InstanceInfo | None = None


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
    text = os.environ.get(ENV_VAR)
    if text:
        return InstanceInfo.from_json(text)
    raise NotOnNodeError(
        "instance_info() only works inside a function running on a skyhive node "
        f"(no worker context here, and ${ENV_VAR} is not set)"
    )
