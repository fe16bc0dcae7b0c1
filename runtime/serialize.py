"""Turning calls into bytes and results back into values or exceptions.

Functions are pickled with cloudpickle, by value when they come from the user's own code (a script,
a test module, a project folder) so that the node does not need that code installed, and by reference
when they come from an installed package. Arguments and results use pickle protocol 5 so large
buffers (numpy arrays, bytes) travel out of band, without being copied into the pickle.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import types
import sys
import sysconfig
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle

from ..errors import RemoteError, SerializationError

__all__ = ["dump_function", "dump_args", "dump_value", "load_value", "dump_exception", "rebuild_exception"]

_installed_roots = tuple(
    os.path.realpath(p)
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_by_value_checked: dict[str, bool] = {}
_NO_ARGS = pickle.dumps(((), {}), protocol=5)


def register_user_code(obj: Any) -> None:
    """Pickle `obj`'s module by value if it is the user's own code (see the module docstring)."""
    _register_user_module(obj)


def _register_user_module(fn: Any) -> None:
    """Pickle `fn`'s module by value if it is the user's own code, not an installed package."""
    name = getattr(fn, "__module__", None)
    if not name or name == "__main__" or name in _by_value_checked:
        return
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    user = bool(path) and not os.path.realpath(path).startswith(_installed_roots)
    top = name.partition(".")[0]
    user = user and top != "skyhive"
    _by_value_checked[name] = user
    if user and module is not None:
        cloudpickle.register_pickle_by_value(module)


_SIMPLE = frozenset({int, float, str, bytes, bool, type(None), complex})


class _Pickled:
    """A function's pickle, and what it depended on when it was made."""

    __slots__ = ("names", "fingerprint", "fn_id", "payload", "name")

    def __init__(self, names: tuple[str, ...], fingerprint: tuple[Any, ...], fn_id: bytes, payload: bytes,
                 name: str) -> None:
        self.names = names
        self.fingerprint = fingerprint
        self.fn_id = fn_id
        self.payload = payload
        self.name = name


_fn_cache: weakref.WeakKeyDictionary[Any, _Pickled] = weakref.WeakKeyDictionary()


def _global_names(fn: Any) -> tuple[str, ...]:
    code = getattr(fn, "__code__", None)
    g = getattr(fn, "__globals__", None)
    if code is None or g is None:
        return ()
    return tuple(name for name in code.co_names if name in g)


def _fingerprint(fn: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """What a by-value pickle of `fn` depends on that can be rebound: the globals it names and its
    closure cells (by identity; immutable scalars by value). A cached pickle is reused only while
    this is unchanged, so `LR = 0.2` after a first call is seen by the next one."""
    g = getattr(fn, "__globals__", None)
    parts: list[Any] = []
    if g is not None:
        for name in names:
            v = g.get(name)
            parts.append(v if type(v) in _SIMPLE else id(v))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            v = None
        parts.append(v if type(v) in _SIMPLE else id(v))
    parts.append(id(getattr(fn, "__defaults__", None)))
    parts.append(id(getattr(fn, "__code__", None)))
    return tuple(parts)


def function_name(fn: Any) -> str:
    return f"{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or type(fn).__name__}()"


def dump_function_cached(fn: Callable[..., Any]) -> _Pickled:
    """The pickle of `fn` with its id and display name, reused while `fn` is unchanged.

    Cached per function object while its `_fingerprint` is the same: a warm call does not pay for
    pickling its function again.
    """
    try:
        cached = _fn_cache.get(fn)
    except TypeError:  # not weak-referenceable (e.g. a builtin): cheap to pickle by reference anyway
        cached = None
    if cached is not None and cached.fingerprint == _fingerprint(fn, cached.names):
        return cached
    _register_user_module(fn)
    try:
        payload = cloudpickle.dumps(fn, protocol=5)
    except Exception as exc:
        raise SerializationError(f"function {_name(fn)} cannot be pickled: {type(exc).__name__}: {exc}") from exc
    names = _global_names(fn)
    entry = _Pickled(names, _fingerprint(fn, names), hashlib.blake2b(payload, digest_size=16).digest(), payload,
                     function_name(fn))
    try:
        _fn_cache[fn] = entry
    except TypeError:
        pass
    return entry


def dump_function(fn: Callable[..., Any]) -> tuple[bytes, bytes]:
    """(fn_id, payload): the cloudpickled function and a digest that names it on a worker."""
    entry = dump_function_cached(fn)
    return entry.fn_id, entry.payload


def _plain(obj: Any, depth: int = 0) -> bool:
    """True when plain pickle gives the same bytes cloudpickle would (no code or user classes)."""
    t = type(obj)
    if t in _SIMPLE:
        return True
    if depth < 3 and (t is tuple or t is list) and len(obj) <= 256:
        return all(_plain(x, depth + 1) for x in obj)
    if depth < 3 and t is dict and len(obj) <= 256:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in obj.items())
    if t.__name__ == "ndarray" and t.__module__ == "numpy":
        return not obj.dtype.hasobject
    return False


def _dumps(obj: Any, buffers: list[Any]) -> bytes:
    if _plain(obj):
        return pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return cloudpickle.dumps(obj, protocol=5, buffer_callback=buffers.append)


def dump_args(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, list[Any]]:
    """Pickle `(args, kwargs)`; on failure name the argument that cannot be pickled."""
    if not args and not kwargs:
        return _NO_ARGS, []
    args, kwargs = items_of_generators(args, kwargs)
    for value in (*args, *kwargs.values()):
        if type(value) not in _SIMPLE:  # an instance of the user's own class travels by value too
            _register_user_module(type(value))
    buffers: list[Any] = []
    try:
        data = _dumps((args, kwargs), buffers)
    except Exception as exc:
        raise _name_bad_argument(fn, args, kwargs, exc) from exc
    return data, [b.raw() for b in buffers]


def dump_value(value: Any, what: str = "value") -> tuple[bytes, list[Any]]:
    """Pickle a value with out-of-band buffers; raises `SerializationError` naming `what` it was."""
    buffers: list[Any] = []
    try:
        data = _dumps(value, buffers)
    except Exception as exc:
        raise SerializationError(f"{what} of type {type(value).__name__} cannot be pickled: {type(exc).__name__}: {exc}") from exc
    return data, [b.raw() for b in buffers]


def dump_inline(value: Any, what: str = "value") -> bytes:
    """Pickle a value with every buffer in-band (a streamed item travels in one `Item` frame)."""
    try:
        return pickle.dumps(value, protocol=5) if _plain(value) else cloudpickle.dumps(value, protocol=5)
    except Exception as exc:
        raise SerializationError(f"{what} of type {type(value).__name__} cannot be pickled: {type(exc).__name__}: {exc}") from exc


def items_of_generators(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A generator argument travels as its items: an iterator over them on the node (a generator
    object itself cannot be pickled). It is run to its end here first, so it must be finite."""
    if not any(isinstance(v, types.GeneratorType) for v in (*args, *kwargs.values())):
        return args, kwargs

    def items(v: Any) -> Any:
        return iter(list(v)) if isinstance(v, types.GeneratorType) else v

    return tuple(items(a) for a in args), {k: items(v) for k, v in kwargs.items()}


def load_value(data: bytes, buffers: tuple[Any, ...] = ()) -> Any:
    """Unpickle what `dump_value` / `dump_args` made."""
    return pickle.loads(data, buffers=buffers)


def dump_exception(exc: BaseException) -> tuple[bytes, str, str, str]:
    """(pickled exception or b"", qualified type name, message, formatted traceback)."""
    tb = "".join(traceback.format_exception(exc))
    cls = type(exc)
    type_name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__
    try:
        message = str(exc)
    except Exception:
        message = "<str() failed>"
    try:
        exc.__traceback__ = None
        data = cloudpickle.dumps(exc, protocol=5)
        cloudpickle.loads(data)  # an exception that pickles but cannot be rebuilt is sent as text only
    except Exception:
        data = b""
    return data, type_name, message, tb


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


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or repr(fn)}()"


def _name_bad_argument(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], exc: Exception) -> SerializationError:
    names: list[str] = []
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, value in enumerate(args):
        label = f"argument {positional[i]!r} (position {i})" if i < len(positional) else f"positional argument {i}"
        if not _picklable(value):
            names.append(label)
    for key, value in kwargs.items():
        if not _picklable(value):
            names.append(f"argument {key!r}")
    what = ", ".join(names) if names else "the arguments"
    return SerializationError(
        f"{what} of {_name(fn)} cannot be pickled ({type(exc).__name__}: {exc}); nothing was sent"
    )


def _picklable(value: Any) -> bool:
    try:
        cloudpickle.dumps(value, protocol=5, buffer_callback=lambda b: None)
    except Exception:
        return False
    return True
