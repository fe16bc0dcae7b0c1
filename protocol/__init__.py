"""skyhive's wire protocol, sans-IO: bytes in, messages out; messages in, bytes out.

Nothing here does I/O or imports asyncio; nothing here imports the rest of skyhive.
"""

from .codec import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
from .codec import MAX_BUFFERS as MAX_BUFFERS
from .codec import MAX_MESSAGE as MAX_MESSAGE
from .connection import CHUNK_SIZE as CHUNK_SIZE
from .connection import Connection as Connection
from .errors import LocalProtocolError as LocalProtocolError
from .errors import ProtocolError as ProtocolError
from .errors import RemoteProtocolError as RemoteProtocolError
from .errors import SkyhiveError as SkyhiveError
from .messages import *  # noqa: F403
from .messages import __all__ as _messages_all
from .states import Role as Role
from .states import State as State

__all__ = [
    "DEFAULT_MAX_FRAME", "MAX_MESSAGE", "MAX_BUFFERS", "CHUNK_SIZE", "Connection", "Role", "State",
    "ProtocolError", "LocalProtocolError", "RemoteProtocolError", "SkyhiveError",
    *_messages_all,
]
