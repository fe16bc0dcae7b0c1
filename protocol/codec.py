"""Frames: a 4-byte big-endian length, then a msgpack body (`[tag, *wire_fields]`).

`Chunk` frames are the one exception to "all msgpack": their header has a fixed layout (a valid msgpack
array of the tag and three uint64s) and the chunk's raw bytes follow it inside the same frame, so a
large buffer is never packed into, or unpacked out of, a msgpack `bin` (each of which would copy it).
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

import msgpack

from .errors import RemoteProtocolError
from .messages import TAGS, Chunk, Message, Result, Submit, wire_fields

__all__ = [
    "HEADER",
    "CHUNK_HEADER",
    "DEFAULT_MAX_FRAME",
    "MAX_MESSAGE",
    "MAX_BUFFERS",
    "encode",
    "encode_chunk_header",
    "submit_tail",
    "encode_submit",
    "encode_value_result",
    "decode_body",
    "decode_message",
    "escape_text",
    "escape_values",
]

HEADER = struct.Struct(">I")
#: 0x94 = msgpack array of 4, 0x0b = Chunk's tag, then three msgpack uint64 (0xcf + 8 bytes).
CHUNK_HEADER = struct.Struct(">BBBQBQBQ")
_CHUNK_PREFIX = bytes([0x94, Chunk.tag])
_CHUNK_TAG = Chunk.tag
_unpackb = msgpack.unpackb
#: Default bound on one frame. Chunks are much smaller (see `runtime`), so only a broken or hostile
#: peer reaches it; it caps what an incomplete frame may make us buffer.
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
#: Bound on the body of any frame other than a `Chunk`: what msgpack decodes into Python objects.
#: Decoding costs memory per object, not per byte (a body of one-element arrays costs ~28 bytes per
#: byte), so this, not the frame limit, bounds what one frame may cost to decode (~120 MB at worst).
#: The largest legitimate message is an `Output` piece (at most 4 MiB of UTF-8); anything bigger
#: (pickles, functions) travels as out-of-band buffers in `Chunk` frames.
MAX_MESSAGE = 4 * 1024 * 1024 + 64 * 1024
#: Bound on the out-of-band buffers one `Submit` or `Result` may announce: each costs an object
#: (and a buffer) before any of its bytes arrive. A sender with more packs them in-band.
MAX_BUFFERS = 4096
#: msgpack decoding limits: the longest array a message has is `buffer_sizes`; maps (`options`) are
#: small; no message uses ext types. Longer ones are refused before their elements are allocated.
MAX_ARRAY = MAX_BUFFERS + 16
MAX_MAP = 256

# Wire types are checked exactly (`type(v) is ...`): msgpack gives back exactly these types, and an
# exact check keeps a bool out of an int field.
_PY_TYPES: dict[str, type] = {
    "int": int,
    "str": str,
    "bytes": bytes,
    "bool": bool,
    "tuple[int, ...]": tuple,
    "dict[str, Any]": dict,
}


#: Messages always sent whole: peers of every version read their leading fields (see `messages`).
_WHOLE = frozenset({"Hello", "Welcome"})


class _Schema:
    __slots__ = ("cls", "names", "types", "defaults", "least", "getter", "decode")

    def __init__(self, cls: type[Message]) -> None:
        pairs = wire_fields(cls)
        self.cls = cls
        self.names = tuple(name for name, _ in pairs)
        self.types = tuple(_PY_TYPES[str(ann)] for _, ann in pairs)
        by_name = {f.name: f for f in fields(cls)}
        #: each wire field's `(default,)` (a factory's value made once), or None when it has none
        self.defaults = tuple(_default_of(by_name[name]) for name in self.names)
        #: the fewest wire values a frame of this message carries: trailing fields at their defaults
        #: are left out (see `wire_values`), never a field without a default
        self.least = len(self.names)
        if cls.__name__ not in _WHOLE:
            while self.least and self.defaults[self.least - 1] is not None:
                self.least -= 1
        get = operator.attrgetter(*self.names) if self.names else (lambda m: ())
        self.getter = (lambda m: (get(m),)) if len(self.names) == 1 else get
        self.decode = _decoder(self)

    def wire_values(self, msg: Message) -> tuple[Any, ...]:
        """`msg`'s wire values, those at the end equal to their defaults (and of the same type: a
        0 in a bool field still travels, and is refused by the peer) left out."""
        values = self.getter(msg)
        n, least, defaults = len(values), self.least, self.defaults
        while n > least:
            (default,) = defaults[n - 1]  # type: ignore[misc]
            value = values[n - 1]
            if value.__class__ is not default.__class__ or value != default:
                break
            n -= 1
        return values if n == len(values) else values[:n]

    def refuse(self, values: tuple[Any, ...]) -> None:
        """Raise the `RemoteProtocolError` naming what is wrong with `values` (this message's wire
        values, the tag left out): their count, or the first one of the wrong type."""
        name, most = self.cls.__name__, len(self.names)
        if not self.least <= len(values) <= most:
            expected = str(most) if self.least == most else f"{self.least} to {most}"
            raise RemoteProtocolError(f"{name} frame has {len(values)} fields, expected {expected}")
        for field_name, want, value in zip(self.names, self.types, values):
            if type(value) is not want:
                raise RemoteProtocolError(f"{name}.{field_name} should be {want.__name__}, got {type(value).__name__}")

    def decode_some(self, obj: tuple[Any, ...]) -> Message:
        """Decode a frame that leaves out some, not all, of the trailing default fields (the
        generated decoder does the whole form and the shortest): the same checks, in a loop; the
        fields left out get their defaults from the class's `__init__`."""
        values = obj[1:]
        if not self.least <= len(values) <= len(self.names):
            self.refuse(values)
        for want, value in zip(self.types, values):
            if value.__class__ is not want:
                self.refuse(values)
        return self.cls(**dict(zip(self.names, values)))


def _default_of(f: Any) -> tuple[Any] | None:
    if f.default is not MISSING:
        return (f.default,)
    if f.default_factory is not MISSING:
        return (f.default_factory(),)
    return None


def _decoder(schema: _Schema) -> Callable[[tuple[Any, ...]], Message]:
    """The function turning a decoded body (`(tag, *wire values)`, the tag already looked up) into a
    `schema.cls`: checks the count and the exact type of every value, then sets each field through
    its slot — what the frozen dataclass's `__init__` does through `object.__setattr__`, without
    matching keywords — and gives the fields that do not travel, or were left out at their
    defaults, their defaults. Generated per class, unrolled (one comparison and one statement a
    field), as `dataclasses` generates `__init__`, for the whole form and the shortest (a plain
    `Submit`, an ok `Result`): every frame pays for it. A form in between: `_Schema.decode_some`."""
    cls, names, least = schema.cls, schema.names, schema.least
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_refuse": schema.refuse,
                           "_some": schema.decode_some}
    fill: list[str] = []  # what a field gets when absent: an expression over `env`
    for i, name in enumerate(names):
        env[f"_t{i}"] = schema.types[i]
        env[f"_set{i}"] = getattr(cls, name).__set__
    by_name = {f.name: f for f in fields(cls)}
    for i, f in enumerate(by_name[name] for name in names):
        fill.append(_fill_expr(f, f"w{i}", env))
    rest = [f for f in fields(cls) if f.name not in names]
    for j, f in enumerate(rest):
        env[f"_dset{j}"] = getattr(cls, f.name).__set__
    rest_lines = [f"        _dset{j}(msg, {_fill_expr(f, f'r{j}', env)})" for j, f in enumerate(rest)]
    if getattr(cls, "__post_init__", None) is not None:  # (no message has one today)
        env.update(_post_init=cls.__post_init__, _Error=RemoteProtocolError)  # type: ignore[attr-defined]
        rest_lines += ["        try:", "            _post_init(msg)", "        except (TypeError, ValueError) as exc:",
                       f"            raise _Error(f'invalid {cls.__name__}: {{exc}}') from None"]

    def form(count: int) -> list[str]:
        """The statements decoding a frame of `count` wire values."""
        out = [f"    if n == {count + 1}:", f"        (_, {''.join(f'v{i}, ' for i in range(count))}) = obj"]
        if count:
            checks = " or ".join(f"v{i}.__class__ is not _t{i}" for i in range(count))
            out += [f"        if {checks}:", "            _refuse(obj[1:])"]
        out.append("        msg = _new(_cls)")
        out += [f"        _set{i}(msg, v{i})" for i in range(count)]
        out += [f"        _set{i}(msg, {fill[i]})" for i in range(count, len(names))]
        return out + rest_lines + ["        return msg"]

    lines = ["def decode(obj):", "    n = len(obj)"]
    if least < len(names):
        lines += form(least)
    lines += form(len(names))
    lines.append("    return _some(obj)" if least < len(names) else "    _refuse(obj[1:])")
    exec("\n".join(lines), env)  # noqa: S102 - generated from the class's own field names and types
    return env["decode"]  # type: ignore[no-any-return]


def _fill_expr(f: Any, key: str, env: dict[str, Any]) -> str:
    """The expression giving field `f` its default in a generated decoder (a factory's: called)."""
    if f.default is not MISSING:
        env[f"_default_{key}"] = f.default
        return f"_default_{key}"
    if f.default_factory is dict:
        return "{}"  # (a display: cheaper than calling dict)
    if f.default_factory is not MISSING:
        env[f"_factory_{key}"] = f.default_factory
        return f"_factory_{key}()"
    return "None"  # (a field without a default is never absent: `least` counts it)


class _Schemas(dict):  # type: ignore[type-arg]
    """Each message class's `_Schema`, made on first use: a worker's start pays for the messages it
    sends or reads, not for generating a decoder of every message of the protocol."""

    def __missing__(self, cls: type[Message]) -> _Schema:
        schema = self[cls] = _Schema(cls)  # (two threads may both make it: equal schemas, either kept)
        return schema


_SCHEMA: dict[type[Message], _Schema] = _Schemas()
_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_pack_len = HEADER.pack


def encode(msg: Message) -> bytes:
    """The frame (length prefix included) for `msg`: its tag and wire values, those at the end that
    are at their defaults left out (but a `Hello`'s or `Welcome`'s: see `_WHOLE`). `Chunk` goes
    through `encode_chunk_header`. Text that is not valid Unicode travels escaped (`escape_text`)."""
    cls = type(msg)
    values = (cls.tag, *_SCHEMA[cls].wire_values(msg))
    try:
        body = _packb(values)
    except UnicodeEncodeError:  # (rare: checked only when packing failed, so every other frame pays nothing)
        body = _packb(escape_values(values))
    return _pack_len(len(body)) + body


def escape_text(text: str) -> str:
    """`text` as valid Unicode, which UTF-8 (the wire's text encoding) can carry: each lone surrogate
    Python uses for an undecodable byte (`os.fsdecode(b"bad-\\xff")`, a file name that is not UTF-8)
    becomes that byte's escape (`bad-\\xff`), any other lone surrogate its `\\udXXX` escape; valid
    text is returned as it is. Text from a peer is decoded strictly: a sender escapes, never the
    receiver."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub(_escape_one, text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def escape_values(value: Any) -> Any:
    """`value` (wire values: str, bytes, numbers, and tuples, lists and dicts of them) with every str
    in it escaped (`escape_text`)."""
    if value.__class__ is str:
        return escape_text(value)
    if isinstance(value, (tuple, list)):
        return type(value)(escape_values(v) for v in value)
    if isinstance(value, dict):
        return {escape_values(k): escape_values(v) for k, v in value.items()}
    return value


# Templates of the two messages every call makes (a `Submit` without buffers, an ok `Result` without
# buffers): their constant parts packed once, so the per-call work is packing what varies. They give
# exactly the bytes `encode` gives for the same message (tests hold them to that): an ok `Result`
# is [tag, task_id, True, value]; a `Submit` [tag, task_id, fn_id, fn, args], then
# buffer_sizes=() and batch if batch or options is set, then options if set.
_pack_one = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_RESULT_TAG = Result.tag
assert _SCHEMA[Result].names[:3] == ("task_id", "ok", "value") and _SCHEMA[Result].least == 3, \
    "update the Result template"
assert _SCHEMA[Submit].names[:7] == ("task_id", "fn_id", "fn", "args", "buffer_sizes", "batch", "options") \
    and _SCHEMA[Submit].least == 4, "update the Submit template"


def submit_tail(*, fn_id: bytes, fn: bytes, args: bytes, batch: bool, options: dict[str, Any]) -> bytes:
    """A `Submit` without buffers, packed once but for its task id: the array's head and tag, then
    the fields after `task_id` (see `encode_submit`)."""
    if not (type(fn_id) is bytes and type(fn) is bytes and type(args) is bytes and type(batch) is bool
            and type(options) is dict):
        for name, value, want in (("fn_id", fn_id, bytes), ("fn", fn, bytes), ("args", args, bytes),
                                  ("batch", batch, bool), ("options", options, dict)):
            if type(value) is not want:
                raise TypeError(f"Submit.{name} should be {want.__name__}, got {type(value).__name__}")
    if options:
        try:
            packed = _pack_one(options)
        except UnicodeEncodeError:  # (an output filter's text, say: escaped as `encode` does)
            packed = _pack_one(escape_values(options))
        head, rest = _SUBMIT_HEADS[8], _BATCH_NO_SIZES[batch] + packed
    elif batch:
        head, rest = _SUBMIT_HEADS[7], _BATCH_NO_SIZES[True]
    else:
        head, rest = _SUBMIT_HEAD_PLAIN, b""
    return b"".join((head, _pack_one(fn_id), _pack_one(fn) if fn else _EMPTY_BIN, _pack_one(args), rest))


_EMPTY_BIN = _pack_one(b"")
_BATCH_NO_SIZES = {flag: _pack_one(()) + _pack_one(flag) for flag in (False, True)}  # buffer_sizes=(), batch
_SUBMIT_HEADS = {count: bytes([0x90 | count, Submit.tag]) for count in (5, 7, 8)}  # (tag + values)
_SUBMIT_HEAD_PLAIN = _SUBMIT_HEADS[5]
_HEAD_SIZE = 2


def encode_submit(task_id: int, tail: bytes) -> bytes:
    """The frame of `Submit(task_id=task_id, ...)` whose other fields `submit_tail` packed."""
    body = tail[:_HEAD_SIZE] + _pack_one(task_id) + tail[_HEAD_SIZE:]
    return _pack_len(len(body)) + body


def encode_value_result(task_id: int, value: bytes) -> bytes:
    """The frame of `Result(task_id=task_id, ok=True, value=value)` (no buffers)."""
    body = _pack_one((_RESULT_TAG, task_id, True, value))  # (one pack: fewer copies than joining parts)
    return _pack_len(len(body)) + body


def encode_chunk_header(ref: int, index: int, offset: int, size: int) -> bytes:
    """Length prefix and header of a `Chunk` frame whose `size` raw bytes the caller writes next."""
    body_len = CHUNK_HEADER.size + size
    return HEADER.pack(body_len) + CHUNK_HEADER.pack(0x94, Chunk.tag, 0xCF, ref, 0xCF, index, 0xCF, offset)


def decode_body(body: memoryview) -> Message:
    """Decode one frame body into a message; raises `RemoteProtocolError` saying what was wrong.

    For a `Chunk`, `data` is a memoryview into `body`: copy it before `body`'s buffer changes.
    """
    if len(body) > 1 and body[0] == 0x94 and body[1] == _CHUNK_TAG:  # (0x94: also an ok Result's head)
        return _decode_chunk(body)
    if len(body) > MAX_MESSAGE:
        raise RemoteProtocolError(
            f"message frame of {len(body)} bytes exceeds the MAX_MESSAGE limit of {MAX_MESSAGE} bytes "
            "(only Chunk frames may be larger)"
        )
    return decode_message(body)


def decode_message(body: bytes | memoryview) -> Message:
    """`decode_body` for a body known not to be a `Chunk`'s and at most `MAX_MESSAGE` bytes (the
    caller checked both: `Connection`'s one-whole-frame path)."""
    try:
        obj = _unpackb(body, use_list=False, raw=False, strict_map_key=True, max_array_len=MAX_ARRAY,
                       max_map_len=MAX_MAP, max_ext_len=0)
    except ValueError as exc:
        if "exceeds max_" in str(exc):  # msgpack names the limit: "N exceeds max_array_len(M)"
            raise RemoteProtocolError(f"frame body refused by a decoding limit: {exc}") from None
        raise RemoteProtocolError(f"frame body is not valid msgpack (ValueError: {exc})") from None
    except Exception as exc:  # msgpack raises many types for garbage: all mean the same here
        raise RemoteProtocolError(f"frame body is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if obj.__class__ is not tuple or not obj or obj[0].__class__ is not int:
        raise RemoteProtocolError(f"frame body is not a [tag, ...] array (got {type(obj).__name__})")
    decode = _DECODERS.get(obj[0])
    if decode is None:
        raise RemoteProtocolError(f"unknown message type tag {obj[0]}")
    return decode(obj)


def _first_decode(cls: type[Message]) -> Callable[[tuple[Any, ...]], Message]:
    """The decoder of `cls` until its first frame: makes the generated one, puts it in its place."""

    def decode(obj: tuple[Any, ...]) -> Message:
        real = _DECODERS[cls.tag] = _SCHEMA[cls].decode
        return real(obj)

    return decode


#: tag -> the decoder of its message class (`Chunk`'s frames never reach msgpack: not here)
_DECODERS: dict[int, Callable[[tuple[Any, ...]], Message]] = {
    tag: _first_decode(cls) for tag, cls in TAGS.items() if cls is not Chunk}


def _decode_chunk(body: memoryview) -> Chunk:
    if len(body) < CHUNK_HEADER.size:
        raise RemoteProtocolError(f"Chunk frame of {len(body)} bytes is shorter than its header")
    _, _, m1, ref, m2, index, m3, offset = CHUNK_HEADER.unpack_from(body)
    if not m1 == m2 == m3 == 0xCF:
        raise RemoteProtocolError("Chunk header is not in canonical form")
    return Chunk(ref=ref, index=index, offset=offset, data=body[CHUNK_HEADER.size :])
