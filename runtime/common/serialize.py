"""Turning calls into bytes and results back into values or exceptions.

Functions are pickled with cloudpickle, by value when they come from the user's own code (a script,
a test module, a project folder) so that the node does not need that code installed, and by reference
when they come from an installed package — at any depth: a class, function or module of the user's
own code met anywhere in an argument or a result travels by value too (`_Pickler.reducer_override`).

Arguments and results use pickle protocol 5 so large buffers travel out of band, without being
copied into the pickle: numpy arrays, and `bytes`/`bytearray`/`str` of `OOB_MIN` or more found in the
value or its containers (`_lift`); a `memoryview` of `OOB_MIN` bytes or more anywhere. Whatever stays in band and still makes the
pickle larger than `INBAND_MAX` (a large object inside a user class, a list of a million ints) travels
as an out-of-band buffer itself: the in-band part is then empty and buffer 0 is the pickle
(`load_value` knows). So no message frame grows with the value; the protocol's chunks carry it.
"""

from __future__ import annotations

import functools
import inspect
import io
import os
import pickle
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle

from ...errors import SerializationError
from ...protocol.codec import MAX_BUFFERS, MAX_MESSAGE
from .keys import content_key

__all__ = ["PickledFunction", "dump_function", "dump_function_cached", "dump_args", "dump_value", "load_value"]


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    """Where installed code lives: the interpreter's library folders, and the folder skyhive's own
    dependencies were installed into (on a node, skyhive's runtime folder, outside site-packages: its
    cloudpickle must never be taken for the user's code and pickled by value). Found on first use: a
    worker never needs them, and importing `sysconfig` was ~5 ms of its start on a loaded machine."""
    import sysconfig

    return tuple(
        os.path.realpath(p)
        for p in {
            *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
            os.path.dirname(os.path.dirname(cloudpickle.__file__)),
        }
    )

_by_value_checked: dict[str, bool] = {}
#: `dump_args` of no arguments
NO_ARGS = pickle.dumps(((), {}), protocol=5)

#: `bytes`, `bytearray` and `str` at least this large leave the pickle as out-of-band buffers.
OOB_MIN = 64 * 1024
#: An in-band pickle larger than this travels as an out-of-band buffer itself (far below the
#: protocol's MAX_MESSAGE, which bounds what a message frame may cost to decode).
INBAND_MAX = 256 * 1024


def register_user_code(obj: Any) -> None:
    """Pickle `obj`'s module by value if it is the user's own code (see the module docstring)."""
    _register_user_module(obj)


def _register_user_module(fn: Any) -> None:
    """Pickle `fn`'s module by value if it is the user's own code, not an installed package."""
    _register_module_name(getattr(fn, "__module__", None))


def _register_module_name(name: str | None) -> None:
    if not name or name == "__main__" or name in _by_value_checked:
        return
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    user = bool(path) and not os.path.realpath(path).startswith(_installed_roots())
    top = name.partition(".")[0]
    user = user and top != "skyhive"
    _by_value_checked[name] = user
    if user and module is not None:
        cloudpickle.register_pickle_by_value(module)


_SIMPLE = frozenset({int, float, str, bytes, bool, type(None), complex})
#: Values pickled as they are (no out-of-band buffer can come of them, whatever their size).
_SCALARS = frozenset({int, float, bool, complex})


class PickledFunction:
    """A function's pickle, what it depended on when made, and its last small call prepared (kept
    here by `Prepared.for_call`, so that it lives and dies with this pickle)."""

    __slots__ = ("names", "fingerprint", "fn_id", "payload", "name", "last_call", "plain")

    def __init__(self, names: tuple[str, ...], fingerprint: tuple[Any, ...], fn_id: bytes, payload: bytes,
                 name: str) -> None:
        self.names = names
        self.fingerprint = fingerprint
        self.fn_id = fn_id
        self.payload = payload
        self.name = name
        self.last_call: Any = None
        # naming no global, closing over nothing: its code and defaults, all its pickle depends on (held)
        self.plain: tuple[Any, Any] | None = None


_fn_cache: weakref.WeakKeyDictionary[Any, PickledFunction] = weakref.WeakKeyDictionary()


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
    if not names and fn.__class__ is types.FunctionType and fn.__closure__ is None:
        return (id(fn.__defaults__), id(fn.__code__))  # (what the loops below come to for it)
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


def dump_function_cached(fn: Callable[..., Any]) -> PickledFunction:
    """The pickle of `fn` with its id and display name, reused while `fn` is unchanged.

    Cached per function object while its `_fingerprint` is the same: a warm call does not pay for
    pickling its function again.
    """
    try:
        cached = _fn_cache.get(fn)
    except TypeError:  # not weak-referenceable (e.g. a builtin): cheap to pickle by reference anyway
        cached = None
    if cached is not None:
        plain = cached.plain
        if plain is not None:
            if fn.__code__ is plain[0] and fn.__defaults__ is plain[1]:
                return cached
        elif cached.fingerprint == _fingerprint(fn, cached.names):
            return cached
    _register_user_module(fn)
    try:
        payload = cloud_dumps(fn)
    except Exception as exc:
        culprit = _name_bad_capture(fn)
        raise SerializationError(f"function {_name(fn)} cannot be pickled{culprit}: {type(exc).__name__}: {exc}") from exc
    names = _global_names(fn)
    # the content key names it (a large function's pickle is then also its buffer's cache key, hashed once)
    entry = PickledFunction(names, _fingerprint(fn, names), content_key(payload), payload, function_name(fn))
    if not names and fn.__class__ is types.FunctionType and fn.__closure__ is None:
        entry.plain = (fn.__code__, fn.__defaults__)
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


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler, plus: the user's own classes, functions and modules met at any depth
    travel by value; a `memoryview` travels (out of band from `OOB_MIN` bytes) instead of failing."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)):
            _register_module_name(getattr(obj, "__module__", None))
        elif isinstance(obj, types.ModuleType):
            _register_module_name(obj.__name__)
        elif type(obj) is memoryview:
            return _reduce_memoryview(obj)
        elif type(obj) is types.CodeType:
            return _reduce_code(obj)
        return super().reducer_override(obj)


def _reduce_code(code: types.CodeType) -> Any:
    """cloudpickle's reduction of a code object, keeping its file name (cloudpickle writes
    "<dynamic-code>"), so that a remote traceback names the user's file beside the line numbers it
    already keeps."""
    reduce = getattr(cloudpickle.cloudpickle, "_code_reduce", None)
    if reduce is None:  # another cloudpickle: its own reduction, without the file name
        return NotImplemented
    cls, args = reduce(code)
    return cls, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)


def cloud_dumps(obj: Any, buffer_callback: Callable[[Any], None] | None = None) -> bytes:
    """`obj` pickled (protocol 5) by skyhive's pickler: the user's own code by value at any depth."""
    file = io.BytesIO()
    _Pickler(file, protocol=5, buffer_callback=buffer_callback).dump(obj)
    return file.getvalue()


def _reduce_memoryview(view: memoryview) -> Any:
    # out of band from `OOB_MIN` bytes, as bytes and str are: a small view goes in the pickle (a
    # 10-byte view out of band cost a call three times a 10-byte bytes); a strided one is copied
    if view.c_contiguous and view.nbytes >= OOB_MIN:
        return _memoryview_from, (pickle.PickleBuffer(view), view.format, view.shape)
    return _memoryview_from, (view.tobytes(), view.format, view.shape)


def _memoryview_from(buf: Any, fmt: str, shape: tuple[int, ...]) -> memoryview:
    view = memoryview(buf).cast("B")
    return view.cast(fmt, shape) if (fmt, shape) != ("B", (view.nbytes,)) else view


def _bytes_from(buf: Any) -> bytes:
    return bytes(buf)


def _bytearray_from(buf: Any) -> bytearray:
    return bytearray(buf)


def _str_from(buf: Any) -> str:
    return str(buf, "utf-8", "surrogatepass")


class _OutOfBand:
    """Stands in for a large `bytes`/`bytearray`/`str` while pickling: its data leaves the pickle as
    an out-of-band buffer (the pickler does not consult reducer_override for those built-in types)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce_ex__(self, protocol: Any) -> Any:
        obj = self.obj
        if type(obj) is str:
            return _str_from, (pickle.PickleBuffer(obj.encode("utf-8", "surrogatepass")),)
        if type(obj) is bytes:
            return _bytes_from, (pickle.PickleBuffer(obj),)
        return _bytearray_from, (pickle.PickleBuffer(obj),)


_LIFTED = (bytes, bytearray, str)
_WALKED = frozenset({bytes, bytearray, str, list, tuple, dict})


def _lift(obj: Any, seen: dict[int, _OutOfBand], width: int | None, depth: int = 0) -> Any:
    """`obj` with its large `bytes`/`bytearray`/`str` (itself, or in lists, tuples and dicts of at
    most `width` items, up to a few levels deep) replaced by `_OutOfBand` stand-ins; `obj` itself
    when there are none. A value that appears twice becomes one stand-in, so its data travels once."""
    t = type(obj)
    if t in _LIFTED:
        if len(obj) < OOB_MIN:
            return obj
        lifted = seen.get(id(obj))
        if lifted is None:
            lifted = seen[id(obj)] = _OutOfBand(obj)
        return lifted
    if t not in _WALKED or depth >= 4 or (width is not None and len(obj) > width):
        return obj
    if t is list or t is tuple:
        items: list[Any] | None = None
        for i, x in enumerate(obj):
            if type(x) in _WALKED:
                y = _lift(x, seen, width, depth + 1)
                if y is not x:
                    if items is None:
                        items = list(obj)
                    items[i] = y
        if items is None:
            return obj
        return items if t is list else tuple(items)
    if t is dict:
        changed: dict[Any, Any] | None = None
        for k, v in obj.items():
            if type(v) in _WALKED:
                y = _lift(v, seen, width, depth + 1)
                if y is not v:
                    if changed is None:
                        changed = dict(obj)
                    changed[k] = y
        if changed is not None:
            return changed
    return obj


def _dumps(obj: Any, buffers: list[Any]) -> bytes:
    """Pickle `obj`, its large `bytes`/`bytearray`/`str` out of band: looked for first only where it
    is cheap (the value itself, a call's few arguments); if the pickle still comes out large, in every
    list, tuple and dict a few levels deep (a `map` batch of long strings)."""
    dump = _plain_dumps if _plain(obj) else cloud_dumps
    seen: dict[int, _OutOfBand] = {}
    data = dump(_lift(obj, seen, 16), buffers.append)
    if len(data) > INBAND_MAX:
        deeper: dict[int, _OutOfBand] = {}
        lifted = _lift(obj, deeper, None)
        if len(deeper) > len(seen):
            buffers.clear()
            data = dump(lifted, buffers.append)
    return data


def _plain_dumps(obj: Any, buffer_callback: Callable[[Any], None] | None = None) -> bytes:
    return pickle.dumps(obj, protocol=5, buffer_callback=buffer_callback)


def _pack(obj: Any) -> tuple[bytes, list[Any]]:
    """(in-band pickle, out-of-band buffers) of `obj`, keeping the in-band part small (see the
    module docstring) and the buffers within what one message may announce."""
    picked: list[pickle.PickleBuffer] = []
    data = _dumps(obj, picked)
    buffers = [b.raw() for b in picked]
    if len(buffers) >= MAX_BUFFERS:  # too many to announce: everything in band, one buffer
        data, buffers = cloud_dumps(obj), []
    if len(data) > INBAND_MAX:
        return b"", [data, *buffers]
    return data, buffers


#: Arguments pickled as they are by `dump_args`' first case (with `str`/`bytes` under `OOB_MIN`).
_ATOMS = frozenset({int, float, bool, type(None), complex})
_TEXT = frozenset({str, bytes})


def _small_atoms(values: Any) -> bool:
    """True when every value is a number, None, or a `str`/`bytes` too small to leave the pickle:
    nothing in them for the general path (`_pack`) to lift out of band, walk or pickle by value."""
    for v in values:
        t = type(v)
        if t not in _ATOMS and (t not in _TEXT or len(v) >= OOB_MIN):
            return False
    return True


def dump_args(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, list[Any]]:
    """Pickle `(args, kwargs)`; on failure name the argument that cannot be pickled."""
    if not args and not kwargs:
        return NO_ARGS, []
    if _small_atoms(args) and (not kwargs or _small_atoms(kwargs.values())):
        # (`f(3)`, `f("a", n=2)`: the bytes `_pack` gives them, without its walks — ~0.4 us, not ~2.5)
        data = pickle.dumps((args, kwargs), protocol=5)
        if len(data) <= INBAND_MAX:
            return data, []
    args, kwargs = items_of_generators(args, kwargs)
    try:
        return _pack((args, kwargs))
    except Exception as exc:
        raise _name_bad_argument(fn, args, kwargs, exc) from exc


def dump_value(value: Any, what: str = "value") -> tuple[bytes, list[Any]]:
    """Pickle a value with out-of-band buffers; raises `SerializationError` naming `what` it was."""
    if value is None or value.__class__ in _SCALARS:  # most results: nothing to lift out of band
        data = pickle.dumps(value, protocol=5)
        return (data, []) if len(data) <= INBAND_MAX else (b"", [data])  # (a huge int)
    try:
        return _pack(value)
    except Exception as exc:
        raise SerializationError(f"{what} of type {type(value).__name__} cannot be pickled: {type(exc).__name__}: {exc}") from exc


#: The largest pickled item a generator task may stream: an `Item` is a message frame, bounded by
#: `MAX_MESSAGE` (what a peer refuses beyond), less room for the frame's other fields.
MAX_ITEM = MAX_MESSAGE - (64 << 10)


def dump_inline(value: Any, what: str = "value") -> bytes:
    """Pickle a value with every buffer in-band (a streamed item travels in one `Item` frame).

    Raises `SerializationError` if it cannot be pickled, or if its pickle is over `MAX_ITEM` bytes
    (naming the size: yield smaller pieces, or return the large value instead)."""
    try:
        data = pickle.dumps(value, protocol=5) if _plain(value) else cloudpickle.dumps(value, protocol=5)
    except Exception as exc:
        raise SerializationError(f"{what} of type {type(value).__name__} cannot be pickled: {type(exc).__name__}: {exc}") from exc
    if len(data) > MAX_ITEM:
        raise SerializationError(
            f"{what} of type {type(value).__name__} is {len(data)} bytes pickled; a streamed item may be at "
            f"most {MAX_ITEM} bytes: yield smaller pieces, or return the large value")
    return data


def items_of_generators(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A generator argument travels as its items: an iterator over them on the node (a generator
    object itself cannot be pickled). It is run to its end here first, so it must be finite."""
    if not any(isinstance(v, types.GeneratorType) for v in (*args, *kwargs.values())):
        return args, kwargs

    def items(v: Any) -> Any:
        return iter(list(v)) if isinstance(v, types.GeneratorType) else v

    return tuple(items(a) for a in args), {k: items(v) for k, v in kwargs.items()}


def load_value(data: bytes, buffers: tuple[Any, ...] | list[Any] = ()) -> Any:
    """Unpickle what `dump_value` / `dump_args` made (an empty `data`: buffer 0 is the pickle)."""
    if not data and buffers:
        data, buffers = buffers[0], buffers[1:]
    return pickle.loads(data, buffers=buffers)


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


def _name_bad_capture(fn: Any) -> str:
    """' (its captured variable 'lock', a _thread.lock, cannot be)' for what `fn` closes over, names
    as a global or takes as a default that cannot be pickled; '' when none of them is the culprit."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    found: list[tuple[str, Any]] = []
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            found.append((f"captured variable {name!r}", cell.cell_contents))
        except ValueError:  # an empty cell (a name assigned later in the enclosing function)
            continue
    g = getattr(fn, "__globals__", None) or {}
    found += [(f"global {name!r}", g[name]) for name in _global_names(fn)
              if not isinstance(g[name], (types.ModuleType, type)) and not callable(g[name])]
    try:
        params = [p for p in inspect.signature(fn).parameters.values() if p.default is not p.empty]
    except (TypeError, ValueError):
        params = []
    found += [(f"default of argument {p.name!r}", p.default) for p in params]
    bad = [f"{label} ({type(value).__module__}.{type(value).__qualname__})" for label, value in found
           if not _picklable(value)]
    return f": its {', '.join(bad)} cannot be pickled" if bad else ""


def _picklable(value: Any) -> bool:
    try:
        cloud_dumps(value, lambda b: None)
    except Exception:
        return False
    return True
