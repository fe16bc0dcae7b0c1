"""A task's exception on its way back: made into a bounded `Result`'s fields on the worker
(`dump_exception`), raised again in the caller (`rebuild_exception`) — as the original type when it
can be rebuilt there, else as `RemoteError` with the remote traceback."""

from __future__ import annotations

import linecache
import os
import re
import traceback
from types import TracebackType

import cloudpickle

from ...errors import RemoteError
from .serialize import INBAND_MAX, cloud_dumps

__all__ = ["dump_exception", "rebuild_exception", "shown_traceback", "full_tracebacks", "without_skyhive_frames",
           "MAX_ERROR_TEXT"]

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
    """The exception to raise in the caller: the original type when possible (its `.node` and
    `.remote_traceback` set), else `RemoteError`."""
    where = f"node {node}" if node is not None else "the node"
    if data:
        try:
            exc = cloudpickle.loads(data)
        except Exception:
            exc = None
        if isinstance(exc, BaseException):
            exc.remote_traceback = tb  # type: ignore[attr-defined]
            if "node" not in vars(exc):  # which node raised it, as `RemoteError.node` (unless the type has one)
                exc.node = node  # type: ignore[attr-defined]
            exc.add_note(f"\nRemote traceback (from {where}):\n{shown_traceback(tb).rstrip()}")
            return exc
    err = RemoteError(type_name, message, tb, node=node)
    err.add_note(f"\nRemote traceback (from {where}):\n{shown_traceback(tb).rstrip()}")
    return err


_FRAME = re.compile(r'  File "(?P<path>.+)", line (?P<line>\d+), in ')
_PACKAGE_FILE = re.compile(r"(?:^|/)(?:skyhive/)?(?P<top>runtime|protocol|plugins|providers|skyhive)/(?P<rest>.+\.py)$")


def _is_skyhive(path: str) -> bool:
    """True for a file of skyhive itself (on the node: this checkout's layout or the installed package),
    known by its path inside the package, which must name a module the client has too."""
    m = _PACKAGE_FILE.search(path)
    if m is None:
        return False
    # runtime/, protocol/, plugins/, providers/ are siblings both in a checkout and installed (under
    # skyhive/); the package face is skyhive/ in a checkout, their parent when installed
    where = [os.path.join(_TOP, m["top"], m["rest"])]
    if m["top"] == "skyhive":
        where.append(os.path.join(_TOP, m["rest"]))
    return any(os.path.isfile(p) for p in where)


#: skyhive's own folders here: this checkout's root or the installed package (runtime/common/ -> top)
_TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OWN = tuple(os.path.join(_TOP, d) + os.sep for d in ("runtime", "protocol", "plugins", "providers", "skyhive"))


def without_skyhive_frames(tb: TracebackType | None) -> TracebackType | None:
    """The local traceback `tb` without the frames of skyhive's own files (the pool's call, its dispatch):
    the caller's frames stay, linked to each other (`tb_next` is writable); None when none is left."""
    kept = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_OWN):
            kept.append(tb)
        tb = tb.tb_next
    for entry, after in zip(kept, kept[1:] + [None]):
        entry.tb_next = after
    return kept[0] if kept else None


def full_tracebacks() -> bool:
    """True when the user asked for skyhive's own frames in tracebacks: SKYHIVE_TRACEBACK=full."""
    return os.environ.get("SKYHIVE_TRACEBACK", "").strip().lower() == "full"


def shown_traceback(tb: str, *, full: bool | None = None) -> str:
    """The remote traceback as shown to the user: skyhive's own frames left out (the worker's task
    runner, plugin hooks) unless `full` (default: the environment variable SKYHIVE_TRACEBACK=full), and
    each frame of a file this machine has given its source line when the node could not read it (an
    SSH node runs the user's code without the user's file)."""
    if full is None:
        full = full_tracebacks()
    out: list[str] = []
    hidden = 0
    lines = tb.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        frame = _FRAME.match(line)
        if frame is None:
            out.append(line)
            i += 1
            continue
        body = []
        i += 1
        while i < len(lines) and lines[i].startswith("    "):
            body.append(lines[i])
            i += 1
        path = frame["path"]
        if not full and _is_skyhive(path):
            hidden += 1
            continue
        if not body and os.path.isfile(path):
            source = linecache.getline(path, int(frame["line"])).strip()
            if source:
                body = [f"    {source}"]
        out += [line, *body]
    if hidden:
        out.append(f"({hidden} frame{'s' if hidden != 1 else ''} of skyhive itself hidden; "
                   "SKYHIVE_TRACEBACK=full shows them)")
    return "\n".join(out) + ("\n" if tb.endswith("\n") else "")
