"""Every legal move of either side of a connection, in one table.

A side is in one state at a time. Sending or receiving a message is legal only if the table has a row
for (role, state, direction, message type); the row says the next state. Anything else is an error: a
`LocalProtocolError` when we tried to send it, a `RemoteProtocolError` when the peer sent it.
"""

from __future__ import annotations

import enum
import functools

from .messages import (
    Cancel,
    Chunk,
    Function,
    Hello,
    Item,
    Message,
    Missing,
    Output,
    Ping,
    Pong,
    Result,
    Shutdown,
    Started,
    Submit,
    WantFunction,
    Welcome,
)

__all__ = ["Role", "State", "SEND", "RECV", "TRANSITIONS", "table"]


class Role(enum.Enum):
    CLIENT = "client"
    WORKER = "worker"


class State(enum.Enum):
    IDLE = "idle"  # nothing exchanged yet
    HELLO = "hello"  # client: Hello sent, waiting for Welcome; worker: Hello received, must answer
    READY = "ready"
    CLOSED = "closed"  # client sent / worker received Shutdown, or the stream ended
    ERROR = "error"  # sticky: after any protocol error the side refuses to go on


SEND = "send"
RECV = "recv"

Row = tuple[Role, State, str, type[Message]]
_C, _W = Role.CLIENT, Role.WORKER
_READY = State.READY

TRANSITIONS: dict[Row, State] = {
    # handshake
    (_C, State.IDLE, SEND, Hello): State.HELLO,
    (_C, State.HELLO, RECV, Welcome): _READY,
    (_W, State.IDLE, RECV, Hello): State.HELLO,
    (_W, State.HELLO, SEND, Welcome): _READY,
    # (Resume, Ack and Goodbye never pass through a Connection: they are control frames of the
    # resumable link, encoded and read by protocol/resume.py)
    # work
    (_C, _READY, SEND, Submit): _READY,
    (_C, _READY, SEND, Cancel): _READY,
    (_W, _READY, RECV, Submit): _READY,
    (_W, _READY, RECV, Cancel): _READY,
    (_W, _READY, SEND, Started): _READY,
    (_W, _READY, SEND, Output): _READY,
    (_W, _READY, SEND, Item): _READY,
    (_W, _READY, SEND, Result): _READY,
    (_C, _READY, RECV, Started): _READY,
    (_C, _READY, RECV, Output): _READY,
    (_C, _READY, RECV, Item): _READY,
    (_C, _READY, RECV, Result): _READY,
    # content cache: a Submit's buffer sent by reference that the worker does not hold
    (_W, _READY, SEND, Missing): _READY,
    (_C, _READY, RECV, Missing): _READY,
    # a task sent without its function's bytes that the worker no longer holds: asked for, and sent
    (_W, _READY, SEND, WantFunction): _READY,
    (_C, _READY, RECV, WantFunction): _READY,
    (_C, _READY, SEND, Function): _READY,
    (_W, _READY, RECV, Function): _READY,
    # out-of-band buffers and heartbeats, both ways
    **{(r, _READY, d, m): _READY for r in Role for d in (SEND, RECV) for m in (Chunk, Ping, Pong)},
    # the end
    (_C, _READY, SEND, Shutdown): State.CLOSED,
    (_W, _READY, RECV, Shutdown): State.CLOSED,
    # a worker still finishing (plugin teardown) may go on reporting after Shutdown
    **{(_W, State.CLOSED, SEND, m): State.CLOSED for m in (Output, Item, Result, Chunk, Pong, Started)},
    **{(_C, State.CLOSED, RECV, m): State.CLOSED for m in (Output, Item, Result, Chunk, Pong, Started)},
}


@functools.cache
def table(role: Role, direction: str) -> dict[State, dict[type[Message], State]]:
    """For one role and direction: state -> {message type: next state} (the hot-path form).

    Built once per role and direction and shared by every connection (read only: never mutated),
    so a pool of 10,000 workers does not hold 20,000 copies of the same 38 dicts."""
    out: dict[State, dict[type[Message], State]] = {state: {} for state in State}
    for (r, state, d, msg), nxt in TRANSITIONS.items():
        if r is role and d == direction:
            out[state][msg] = nxt
    return out
