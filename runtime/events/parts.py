"""A task event kept in its parts: one flat, JSON-ready tuple, written to the log without being built.

Every call records two task events (`TaskSubmitted`, `TaskFinished`; see `EventLog.task_submitted`).
The log keeps each as its *parts*::

    (template, seq, seconds, microseconds, own fields in declaration order...)

`template` is the event's line as a `%`-template for this pool's log (the pool id escaped into it once;
it begins with `%.0s`, which consumes the template itself and writes nothing); the timestamp is whole
seconds and microseconds, written `%d.%06d`; string fields are already JSON-escaped (the C encoder's
`encode_basestring`). So an event's line is `parts[0] % parts` (`line`): one `%`, no Python code
per field, no float formatting. The event object is built
(`PartsFormat.build`) only when something reads the log's memory.

A line written from parts reads back (`types.from_json`) as the event with `ts = (seconds * 10**6 +
microseconds) / 1e6`, which is the value `build` gives it (both are that rational number correctly
rounded); `to_json` of the event may differ only in how the number `ts` is spelled.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .types import Event

__all__ = ["Parts", "PartsFormat", "escape", "line"]

#: a task event in its parts (see the module's docstring)
Parts = tuple[Any, ...]
#: a string field's JSON form, quotes included (the C encoder when available)
escape: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
_new = object.__new__


def line(parts: Parts) -> str:
    """The log line of an event's parts, newline included: `parts[0] % parts` (the log's flush does
    that inline, one `%` a line; one `%` over a whole run's templates joined was slower)."""
    return parts[0] % parts  # type: ignore[no-any-return]


class PartsFormat:
    """The parts form of one event class (int and str fields only) in the log of pool `pool_id`.

    `fixed` bakes some fields' values into the template (e.g. a `TaskFinished`'s `outcome="ok",
    error=""`, what nearly every call ends with): those are not in the parts, and the line has that
    many fewer conversions.
    """

    def __init__(self, cls: type[Event], pool_id: str, fixed: dict[str, int | str] | None = None) -> None:
        fixed = dict(fixed or {})
        own = fields(cls)[3:]  # after pool_id, seq, ts
        unknown = set(fixed) - {f.name for f in own}
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))} to fix")
        pieces, escaped, names, built = [], [], [], []
        for f in own:
            kind = str(f.type)
            if kind not in ("int", "str") or not f.name.isidentifier():
                raise TypeError(f"{cls.__name__}.{f.name}: a {kind} field; only int and str fields are kept in parts")
            if f.name in fixed:
                value = fixed[f.name]
                if type(value) is not (int if kind == "int" else str):
                    raise TypeError(f"{cls.__name__}.{f.name}: fixed to {value!r}, not an {kind}")
                text = f'"{f.name}":{value:d}' if kind == "int" else f'"{f.name}":{escape(value)}'  # type: ignore
                pieces.append(text.replace("%", "%%"))
                built.append(f"_fixed[{f.name!r}]")
                continue
            v = f"v{len(names)}"
            names.append(v)
            pieces.append(f'"{f.name}":%d' if kind == "int" else f'"{f.name}":%s')
            escaped.append(f"_escape({v})" if kind == "str" else v)
            built.append(f"_loads({v})" if kind == "str" else v)
        head = f'{{"pool_id":{escape(pool_id)},'.replace("%", "%%")
        tail = f'"type":{escape(cls.kind)}}}'.replace("%", "%%")
        self.cls = cls
        self.fixed = fixed
        #: the `%`-template of one line, newline included (the first element of its parts)
        self.template = "%.0s" + head + '"seq":%d,"ts":%d.%06d,' + "".join(p + "," for p in pieces) + tail + "\n"
        unpack = "".join(f"{v}, " for v in names)
        env: dict[str, Any] = {"_escape": escape, "_loads": json.loads, "_new": _new, "_cls": cls,
                               "_template": self.template, "_pool_id": pool_id, "_fixed": fixed}
        lines = [
            "def parts(seq, us, values):",
            f"    ({unpack}) = values",
            f"    return (_template, seq, us // 1000000, us % 1000000, {''.join(a + ', ' for a in escaped)})",
            "def build(parts):",
            f"    (_, seq, sec, usec, {unpack}) = parts",
            "    e = _new(_cls)",
            "    _set_pool_id(e, _pool_id)",
            "    _set_seq(e, seq)",
            "    _set_ts(e, (sec * 1000000 + usec) / 1e6)",
        ]
        for name in ("pool_id", "seq", "ts"):
            env[f"_set_{name}"] = getattr(Event, name).__set__
        for i, f in enumerate(own):  # the slots through their descriptors, as a frozen dataclass's __init__
            env[f"_set{i}"] = getattr(cls, f.name).__set__
            lines.append(f"    _set{i}(e, {built[i]})")
        lines.append("    return e")
        exec("\n".join(lines), env)  # noqa: S102 - generated from the class's own field names
        #: `parts(seq, us, values)`: the parts of the event numbered `seq`, recorded at `us`
        #: microseconds since the epoch, with `values` its own fields that are not fixed, in
        #: declaration order
        self.parts: Callable[[int, int, tuple[Any, ...]], Parts] = env["parts"]
        #: `build(parts)`: the event
        self.build: Callable[[Parts], Event] = env["build"]
        #: how many of its own fields the parts hold
        self.fields = len(names)
