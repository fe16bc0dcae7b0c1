"""Each cloud's spot interruption notice, read from inside the node: one small client per cloud behind
`NoticeSource` (`notice()`: the notice now, normalised to ``{"action", "time", ...}``, or None when none
is scheduled; OSError when the service does not answer). `runtime/onnode/interruption.py` polls the one
the node's provider names (its `Features.notices`, `providers/features.py`) and reports what it finds.
Each module here declares the cloud it reads (`CLOUD`) and how its client is made (`source(wait)`); the
package finds them by that declaration, so a new cloud's notice is one new module:

- ``aws``: EC2's ``spot/instance-action`` through IMDSv2 (`ec2.py`);
- ``gcp``: GCE's ``instance/preempted`` on the metadata server (`gce.py`);
- ``azure``: Azure's Scheduled Events, a ``Preempt`` event (`azure.py`).

Standard library only (this runs in the worker).
"""

from __future__ import annotations

import pkgutil
from importlib import import_module
from typing import Any, Protocol

__all__ = ["NoticeSource", "CLOUDS", "source_for"]


class NoticeSource(Protocol):
    """One cloud's notice, read from the node (see the package docstring)."""

    #: seconds between looks when the environment does not say (each cloud's own advice)
    interval: float
    #: True when a look itself waits for the value to change (GCE's hanging GET): no pause after it
    hangs: bool

    def notice(self) -> dict[str, Any] | None:
        """The interruption notice now, normalised (``action``, ``time`` in UTC ISO 8601 with ``Z``), or
        None when none is scheduled. Raises OSError when the service does not answer, ValueError when its
        answer is garbled."""
        ...


def _sources() -> dict[str, Any]:
    """The notice modules of this package by the cloud each declares (`CLOUD`); each has
    `source(wait)`. A new cloud's notice is one new module here declaring both."""
    found: dict[str, Any] = {}
    for info in pkgutil.iter_modules(__path__):
        module = import_module(f"{__name__}.{info.name}")
        cloud = vars(module).get("CLOUD")
        if isinstance(cloud, str) and callable(vars(module).get("source")):
            found[cloud] = module
    return found


_SOURCES = _sources()

#: the clouds whose notice can be watched (the values of a provider's `Features.notices`)
CLOUDS = tuple(sorted(_SOURCES))


def source_for(cloud: str, wait: float = 5.0) -> NoticeSource:
    """The client for `cloud`'s notice, at its default endpoint (each module says how it is overridden);
    `wait`: the longest one look may hold the connection open (GCE's hanging GET)."""
    module = _SOURCES.get(cloud) if isinstance(cloud, str) else None
    if module is None:
        raise ValueError(f"interruption notices: unknown cloud {cloud!r} (expected one of {', '.join(CLOUDS)})")
    return module.source(wait)
