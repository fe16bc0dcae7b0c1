"""The root of skyhive's exception tree, and the protocol's own error.

They live here, in the lowest layer, because every other layer (runtime, providers, plugins) may raise
a `SkyhiveError` and `protocol/` imports nothing from the rest of the project.
"""

from __future__ import annotations

__all__ = ["SkyhiveError", "ProtocolError", "LocalProtocolError", "RemoteProtocolError"]


class SkyhiveError(Exception):
    """Base class of every error skyhive raises on purpose."""


class ProtocolError(SkyhiveError):
    """The wire protocol was broken: a bad frame, an unknown message, or a version mismatch."""


class LocalProtocolError(ProtocolError):
    """We misused the protocol (sent something the state machine does not allow)."""


class RemoteProtocolError(ProtocolError):
    """The peer misbehaved: it sent bytes that are not a valid frame or message."""
