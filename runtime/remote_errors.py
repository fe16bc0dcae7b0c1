"""A task's exception on its way back: made into a bounded `Result`'s fields on the worker
(`dump_exception`), raised again in the caller (`rebuild_exception`) — as the original type when it
can be rebuilt there, else as `RemoteError` with the remote traceback."""

from __future__ import annotations

import traceback

import cloudpickle

from ..errors import RemoteError
from .serialize import INBAND_MAX, cloud_dumps

__all__ = ["dump_exception", "rebuild_exception", "MAX_ERROR_TEXT"]

#: Error text kept in a `Result` (message and traceback each): the rest is cut, saying so.
MAX_ERROR_TEXT = 64 * 1024


def dump_exception(exc: BaseException) -> tuple[bytes, str, str, str]:
    """(pickled exception or b"", qualified type name, message, formatted traceback).

    Bounded, so that any error fits one message: message and traceback keep `MAX_ERROR_TEXT`
    characters each (saying how much was cut), and an exception whose pickle is larger than
    `INBAND_MAX` travels as text only.
    """
    tb = _cut("".join(traceback.format_exception(exc)), keep_end=True)
    cls = type(exc)
    type_name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__
    try:
        message = str(exc)
    except Exception:
        message = "<str() failed>"
    cut = _cut(message)
    try:
        exc.__traceback__ = None
        if cut is not message:  # the pickle would carry the whole message: send the cut text only
            raise ValueError("message too long")
        data = cloud_dumps(exc)
        if len(data) > INBAND_MAX:
            raise ValueError("pickle too large")
        cloudpickle.loads(data)  # an exception that pickles but cannot be rebuilt is sent as text only
    except Exception:
        data = b""
    return data, type_name, cut, tb


def _cut(text: str, keep_end: bool = False) -> str:
    """`text` if it is at most `MAX_ERROR_TEXT` characters, else its start (or end) and a note."""
    if len(text) <= MAX_ERROR_TEXT:
        return text
    note = f" [... {len(text) - MAX_ERROR_TEXT} characters cut ...] "
    return note + text[-MAX_ERROR_TEXT:] if keep_end else text[:MAX_ERROR_TEXT] + note


def rebuild_exception(data: bytes, type_name: str, message: str, tb: str, node: int | None) -> BaseException:
    """The exception to raise in the caller: the original type when possible, else `RemoteError`."""
    where = f"node {node}" if node is not None else "the node"
    if data:
        try:
            exc = cloudpickle.loads(data)
        except Exception:
            exc = None
        if isinstance(exc, BaseException):
            exc.remote_traceback = tb  # type: ignore[attr-defined]
            exc.add_note(f"\nRemote traceback (from {where}):\n{tb.rstrip()}")
            return exc
    err = RemoteError(type_name, message, tb, node=node)
    err.add_note(f"\nRemote traceback (from {where}):\n{tb.rstrip()}")
    return err
