"""The messages client and worker exchange: small frozen dataclasses, one type tag each.

A message's wire form is a msgpack array: its tag, then its wire fields in the order declared here,
those at the end that are at their defaults left out (a plain `Submit` carries 4 of its 10, an ok
`Result` 3 of its 9); a receiver gives the fields left out their defaults.
Fields whose metadata says ``wire=False`` never travel (the out-of-band buffers a `Submit` or `Result`
carries are filled in by the `Connection` from `Chunk` frames). Tags are part of the protocol: never
reuse or renumber one; `Hello` and `Welcome` keep their tags and leading fields forever, and always
travel whole, so that peers of any version can at least tell each other which version they speak.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .record import Record

__all__ = [
    "PROTOCOL_VERSION",
    "Message",
    "Hello",
    "Welcome",
    "Submit",
    "Started",
    "Output",
    "Result",
    "Cancel",
    "Ping",
    "Pong",
    "Shutdown",
    "Chunk",
    "Resume",
    "Ack",
    "Goodbye",
    "Item",
    "Missing",
    "WantFunction",
    "Function",
    "MESSAGE_TYPES",
    "TAGS",
    "STDOUT",
    "STDERR",
]

#: Bumped on any change to framing or to a message's wire fields.
#: 2: `Resume.received`, `Ack`, `Goodbye` (resumable links, see `resume`).
#: 3: `Item` (a generator task streams its items).
#: 4: the content cache (see `cache`): `Hello.cache_bytes`, `Submit.buffer_keys`/`cached`, `Missing`;
#:    buffers passed beside the connection: `Submit.shared`, `Result.shared`.
#: 5: `Hello.takeover` (a new client of a detached worker starts a new session).
#: 6: `WantFunction`, `Function` (a worker that no longer holds a task's function asks for it).
#: 7: trailing fields at their defaults are left out of a frame (but `Hello`'s and `Welcome`'s).
PROTOCOL_VERSION = 7

#: `Output.stream` values.
STDOUT = 1
STDERR = 2

_NOWIRE = {"wire": False}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Message(Record):
    """Base of every message. `tag` is the message's type tag on the wire."""

    tag: ClassVar[int] = -1


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Hello(Message):
    """Client → worker, first frame: who I am and what I accept."""

    tag: ClassVar[int] = 1
    protocol_version: int
    python_version: str
    skyhive_version: str
    max_frame: int
    # >= 0 only in the control Hello of a resumable link (see `resume`): the client holds the worker's
    # frames up to this number and asks for the ones after it
    resume_from: int = -1
    # the worker keeps up to this many bytes of large keyed buffers in its content cache (see `cache`)
    cache_bytes: int = 0
    # only in the control Hello of a resumable link, with resume_from=0: a new client (another process
    # attaching to a named pool's detached worker) takes the worker over; the worker drops what it
    # kept for the previous client and starts a new session (a new handshake)
    takeover: bool = False


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Welcome(Message):
    """Worker → client, answer to `Hello`. A non-empty `error` means the worker refuses the client."""

    tag: ClassVar[int] = 2
    protocol_version: int
    python_version: str
    skyhive_version: str
    max_frame: int
    pid: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Submit(Message):
    """Client → worker: run a function.

    `fn` is the cloudpickled function, or empty when the worker already holds `fn_id` from an earlier
    `Submit` on this connection. `args` is the pickled `(args, kwargs)` (or, with `batch`, the list of
    single arguments for `map`), pickled with protocol 5: its out-of-band buffers follow as `Chunk`
    frames whose sizes are `buffer_sizes`. `options` are plain msgpack values (output filters, capture).
    `buffer_keys` is empty or one `cache.KEY_SIZE`-byte content key per buffer (zeros: not cached);
    the buffers listed in `cached` are not sent: the worker takes them from its content cache (or
    asks for them with `Missing`). The buffers listed in `shared` are not sent either: they travel
    beside the connection (shared memory with a worker on the same machine); the `Connection` leaves
    None in their place for the caller to fill in.
    """

    tag: ClassVar[int] = 3
    task_id: int
    fn_id: bytes
    fn: bytes
    args: bytes
    buffer_sizes: tuple[int, ...] = ()
    batch: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    buffer_keys: bytes = b""
    cached: tuple[int, ...] = ()
    shared: tuple[int, ...] = ()
    buffers: tuple[Any, ...] = field(default=(), metadata=_NOWIRE)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Started(Message):
    """Worker → client: the task left the queue and is running."""

    tag: ClassVar[int] = 4
    task_id: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Output(Message):
    """Worker → client: text a task wrote to `stream` (`STDOUT` or `STDERR`)."""

    tag: ClassVar[int] = 5
    task_id: int
    stream: int
    data: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Result(Message):
    """Worker → client: a task ended.

    On success `ok` is true and `value` the pickled return value (out-of-band buffers as `Chunk`
    frames). On failure `value` is the pickled exception when it could be pickled (else empty), and
    `error_type`, `error_message`, `traceback` describe it in plain text. `cancelled` marks a task
    ended by `Cancel`. `shared` as in `Submit`.
    """

    tag: ClassVar[int] = 6
    task_id: int
    ok: bool
    value: bytes
    buffer_sizes: tuple[int, ...] = ()
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    cancelled: bool = False
    shared: tuple[int, ...] = ()
    buffers: tuple[Any, ...] = field(default=(), metadata=_NOWIRE)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Cancel(Message):
    """Client → worker: stop this task (queued or running)."""

    tag: ClassVar[int] = 7
    task_id: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Ping(Message):
    """Either side: are you alive? Answered by `Pong` with the same `nonce`."""

    tag: ClassVar[int] = 8
    nonce: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Pong(Message):
    """Either side: answer to `Ping`."""

    tag: ClassVar[int] = 9
    nonce: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Shutdown(Message):
    """Client → worker: finish (run plugin teardown) and exit. The last frame the client sends."""

    tag: ClassVar[int] = 10
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Chunk(Message):
    """Either side: a piece of out-of-band buffer `index` of message `ref` (a task id).

    On the wire the chunk's bytes follow the msgpack header raw, so they are copied once, straight
    into the buffer being assembled.
    """

    tag: ClassVar[int] = 11
    ref: int
    index: int
    offset: int
    data: Any = field(default=b"", metadata=_NOWIRE)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Resume(Message):
    """Worker → client, answer to a reconnect `Hello`: where both directions pick up again.

    The worker's frames after number `from_seq` follow (again); the worker holds the client's frames
    up to number `received`, so the client sends its own frames after that one again. Travels as a
    control frame of a resumable link (see `resume`), never through a `Connection`.
    """

    tag: ClassVar[int] = 12
    from_seq: int
    received: int = 0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Ack(Message):
    """Either end of a resumable link: I hold your frames up to number `seq`; drop them from replay."""

    tag: ClassVar[int] = 13
    seq: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Goodbye(Message):
    """Worker → client, last control frame: the worker exited with `exit_status` (negative: signal)."""

    tag: ClassVar[int] = 14
    exit_status: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Item(Message):
    """Worker → client: the next item a generator task yielded, while it runs.

    `index` counts a task's items from 0, in the order yielded; `value` is the pickled item. The
    task's `Result` follows its last item (its value: how many items there were).
    """

    tag: ClassVar[int] = 15
    task_id: int
    index: int
    value: bytes


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Missing(Message):
    """Worker → client: buffers `indices` of task `task_id` were sent by reference (`Submit.cached`)
    and are not in the content cache (evicted, or this is a new worker): send them as `Chunk`s."""

    tag: ClassVar[int] = 16
    task_id: int
    indices: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class WantFunction(Message):
    """Worker → client: task `task_id` came without its function's bytes (`Submit.fn` empty: the
    client believed this worker holds `fn_id`) and this worker does not hold it (its cache of loaded
    functions was cleared meanwhile). The task waits for the client's `Function`."""

    tag: ClassVar[int] = 17
    task_id: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Function(Message):
    """Client → worker, answer to `WantFunction`: the cloudpickled function of task `task_id` — or
    empty when the client cannot send it in a message (a large function travels as a buffer with
    its task): the task then fails."""

    tag: ClassVar[int] = 18
    task_id: int
    fn: bytes


MESSAGE_TYPES: tuple[type[Message], ...] = (
    Hello, Welcome, Submit, Started, Output, Result, Cancel, Ping, Pong, Shutdown, Chunk, Resume, Ack, Goodbye,
    Item, Missing, WantFunction, Function,
)

#: tag -> message class, the one table the codec uses.
TAGS: dict[int, type[Message]] = {cls.tag: cls for cls in MESSAGE_TYPES}
assert len(TAGS) == len(MESSAGE_TYPES), "duplicate message tag"


def wire_fields(cls: type[Message]) -> tuple[tuple[str, Any], ...]:
    """The (name, annotation) pairs of `cls` that travel, in wire order."""
    return tuple((f.name, f.type) for f in fields(cls) if f.metadata.get("wire", True))
