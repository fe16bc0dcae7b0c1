"""The root of skyhive's exception tree and the protocol's own errors, as the protocol imports them.

They are defined in `skyhive/errors.py`, the project's floor (it imports nothing of the project), with
every other error a user can catch; the protocol imports nothing else of the project.
"""

from __future__ import annotations

from ..errors import LocalProtocolError, ProtocolError, RemoteProtocolError, SkyhiveError

__all__ = ["SkyhiveError", "ProtocolError", "LocalProtocolError", "RemoteProtocolError"]
