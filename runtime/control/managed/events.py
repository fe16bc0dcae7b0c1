"""A managed job's events, typed: one frozen dataclass per kind of event (what `store.py` appends to
the job's `events.jsonl`, and what `lifecycle.py` folds into the job's state).

On disk an event is one JSON object: `{"kind": KIND, "time": SECONDS, ...its fields}` — the format
every earlier version wrote, read unchanged (`from_record`), written the same way (`to_record`). A
field an older record lacks takes its default; a field of the wrong type raises `TypeError` or
`ValueError` (the fold skips that event, naming it); a kind this version does not know is an
`Unknown` event, which changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["JobEvent", "Submitted", "ControllerStarted", "AttemptStarted", "Running", "Notice", "Lost", "Replaced",
           "Stopped", "Unneeded", "Waiting", "ErrorExit", "CancelAsked", "Ending", "Ended", "Leaked", "Unknown",
           "EVENT_TYPES", "from_record", "to_record"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """One event of a managed job: `time` (seconds since the epoch) and the fields of its kind."""

    kind: ClassVar[str] = ""
    time: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Submitted(JobEvent):
    """The job was submitted: its name and its limits."""

    kind: ClassVar[str] = "submitted"
    name: str = ""
    max_restarts_on_errors: int = 0
    max_recoveries: int | None = None  # None: a record older than the limit (the default then applies)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStarted(JobEvent):
    kind: ClassVar[str] = "controller"
    pid: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptStarted(JobEvent):
    """An attempt started on a fresh pool (`pool`), by the controller `pid`."""

    kind: ClassVar[str] = "attempt"
    attempt: int = 0
    pool: str = ""
    pid: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Running(JobEvent):
    """The attempt's pool is up (again after a node replaced in place): `nodes`, their provider ids."""

    kind: ClassVar[str] = "running"
    attempt: int = 0
    pool: str = ""
    nodes: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice(JobEvent):
    """A node's interruption notice (`notice`: what the cloud said)."""

    kind: ClassVar[str] = "notice"
    node: int = 0
    notice: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Lost(JobEvent):
    """A node was lost: a new attempt follows (a recovery). `places`: where it ran (tried last)."""

    kind: ClassVar[str] = "lost"
    attempt: int | None = None
    detail: str = ""
    places: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Replaced(JobEvent):
    """A multi-node attempt's lost `node` replaced in its pool, the others kept (a recovery too)."""

    kind: ClassVar[str] = "replaced"
    attempt: int = 0
    node: int = 0
    detail: str = ""
    places: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Stopped(JobEvent):
    """A lost attempt's pool stopped and swept (`leaked`: what could not be, with why)."""

    kind: ClassVar[str] = "stopped"
    attempt: int = 0
    leaked: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Unneeded(JobEvent):
    """An attempt started at its predecessor's notice ran nothing: the predecessor ended the job."""

    kind: ClassVar[str] = "unneeded"
    attempt: int = 0
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting(JobEvent):
    """An attempt found no capacity anywhere: another is tried after `retry_in` seconds."""

    kind: ClassVar[str] = "waiting"
    attempt: int = 0
    detail: str = ""
    retry_in: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorExit(JobEvent):
    """The user's program failed (`code`): a restart on errors follows."""

    kind: ClassVar[str] = "error"
    attempt: int = 0
    detail: str = ""
    code: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelAsked(JobEvent):
    kind: ClassVar[str] = "cancel"
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending(JobEvent):
    """The job's outcome is decided ("succeeded" | "failed" | "cancelled"); its pools are being swept.
    `data`: what the final event will say (`detail`, `code`, `attempt`)."""

    kind: ClassVar[str] = "ending"
    outcome: str = "failed"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended(JobEvent):
    """The final event, once the sweep confirmed nothing is left: `outcome` is its kind on disk."""

    kind: ClassVar[str] = "ended"  # (on disk: the outcome itself)
    outcome: str = "failed"
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Leaked(JobEvent):
    """The sweep could not finish: `pools`, what is left with why."""

    kind: ClassVar[str] = "leaked"
    pools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Unknown(JobEvent):
    """An event of a kind this version does not know (a newer one's): kept, folded as nothing."""

    kind: ClassVar[str] = "unknown"
    name: str = ""
    data: dict[str, Any] = field(default_factory=dict)


EVENT_TYPES: dict[str, type[JobEvent]] = {cls.kind: cls for cls in (
    Submitted, ControllerStarted, AttemptStarted, Running, Notice, Lost, Replaced, Stopped, Unneeded, Waiting,
    ErrorExit, CancelAsked, Ending, Leaked)}
OUTCOMES = ("succeeded", "failed", "cancelled")


def _coerce(value: Any, kind: Any, name: str) -> Any:
    """`value` as the field's type (`TypeError`/`ValueError` where a number is not one). Lists and
    objects are taken leniently (a field the fold does not count never costs an event)."""
    text = str(kind)
    if value is None and "None" in text:
        return None
    if text.startswith("int"):
        return int(value)
    if text.startswith("float"):
        return float(value)
    if text.startswith("tuple"):
        return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else (str(value),)
    if text.startswith("dict"):
        return dict(value) if isinstance(value, dict) else {"value": value}
    return str(value)


def from_record(record: dict[str, Any]) -> JobEvent:
    """The typed event of one on-disk record (`KeyError`: no kind or time; `TypeError`/`ValueError`: a
    field of another type)."""
    kind, when = record["kind"], float(record["time"])
    if not isinstance(kind, str):
        raise TypeError(f"kind: {kind!r} is not a name")
    rest = {k: v for k, v in record.items() if k not in ("kind", "time")}
    if kind in OUTCOMES:
        return Ended(time=when, outcome=kind, detail=str(rest.pop("detail", "")), data=rest)
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        return Unknown(time=when, name=kind, data=rest)
    if cls is Ending:
        return Ending(time=when, outcome=str(rest.pop("outcome", "failed")), data=rest)
    values = {f.name: _coerce(rest[f.name], f.type, f.name) for f in dataclasses.fields(cls)
              if f.name != "time" and f.name in rest}
    return cls(time=when, **values)


def to_record(event: JobEvent) -> dict[str, Any]:
    """The on-disk record of `event` (without its time: `store.append` stamps it)."""
    if isinstance(event, Ended):
        return {"kind": event.outcome, "detail": event.detail, **event.data}
    if isinstance(event, Ending):
        return {"kind": "ending", "outcome": event.outcome, **event.data}
    if isinstance(event, Unknown):
        return {"kind": event.name, **event.data}
    out: dict[str, Any] = {"kind": event.kind}
    for f in dataclasses.fields(event):
        if f.name == "time":
            continue
        value = getattr(event, f.name)
        if value is not None:  # (a field not known, as an older version wrote it: left out)
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out
