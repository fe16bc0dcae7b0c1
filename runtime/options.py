"""`sky.Options`: Skyward's one object of a pool's operational settings, given as `Pool(options=...)`.

Each field becomes the `Pool` keyword (or `Settings` field) that means the same in skyhive; a field
skyhive has no setting for is refused when given (it would change how long something waits or how
often it is tried), except three that change nothing that matters here (`cluster`, `logging`, and
`console`, which is the `progress` display). A field left at None is not given: the pool keeps its
own default. A field given both in `options` and as the keyword it means is an error naming both.
The table is in docs/seeds.md ("Options").
"""

from __future__ import annotations

import logging as _logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .concurrency import Worker

__all__ = ["Options", "with_options"]

log = _logging.getLogger(__name__)

#: Options field -> the Pool keyword (or `Settings` field) that means the same
_MAPPED = {
    "selection": "selection",
    "worker": "worker",
    "provision_timeout": "start_timeout",
    "bootstrap_timeout": "build_timeout",
    "shutdown_timeout": "stop_timeout",
    "autoscale_cooldown": "autoscale_cooldown",
    "autoscale_idle_timeout": "autoscale_idle_timeout",
    "console": "progress",
}

#: Options fields skyhive has no setting for, refused when given: what to use instead
_REFUSED = {
    "ssh_timeout": "give the provider its connection timeout: sky.SSH(..., connect_timeout=S) or "
                   "sky.Slurm(..., connect_timeout=S)",
    "provision_retry_delay": "skyhive does not retry a failed provisioning: give several providers or Specs "
                             "to fall back on (docs/clouds.md)",
    "max_provision_attempts": "skyhive does not retry a failed provisioning: give several providers or Specs "
                              "to fall back on (docs/clouds.md)",
    "ssh_retry_interval": "an SSH link is retried for sky.SSH(reconnect_timeout=S), on skyhive's own cadence",
    "default_compute_timeout": "give each call its timeout: @sky.function(timeout=S) or fn(x).with_timeout(S)",
    "reconcile_tick_interval": "skyhive's nodes report at once (the heartbeat is the Settings field "
                               "heartbeat_interval=, a Pool keyword)",
    "retry_on_interruption": "give each call its retries: pool.run(fn, x, retries=N) (a lost worker's call "
                             "is re-run that many times)",
    "health_checker": "skyhive watches its workers by heartbeat (Pool(heartbeat_timeout=S)); a lost node is "
                      "replaced with Pool(replace_failed=True) (docs/replacement.md)",
}

_CONSOLE = {"rich": True, "minimal": True, "log": True, "silent": False}


@dataclass(frozen=True, slots=True)
class Options:
    """Skyward's operational settings of a pool, in one object: `sky.Compute(..., options=sky.Options(
    provision_timeout=600))`. None (the default of every field but `cluster`/`logging`, which change
    nothing here) leaves the pool's own setting. See the module's doc and docs/seeds.md."""

    selection: str | None = None  # Pool(selection=): "cheapest" or "first" among Specs / providers
    worker: Worker | None = None  # Pool(worker=)
    provision_timeout: float | None = None  # Settings.start_timeout: launch, connect, start workers
    ssh_timeout: float | None = None  # refused: the provider's connect_timeout
    bootstrap_timeout: float | None = None  # Settings.build_timeout: building the Image's environment
    provision_retry_delay: float | None = None  # refused
    max_provision_attempts: int | None = None  # refused
    ssh_retry_interval: float | None = None  # refused
    default_compute_timeout: float | None = None  # refused: a call's own timeout
    autoscale_cooldown: float | None = None  # Pool(autoscale_cooldown=)
    autoscale_idle_timeout: float | None = None  # Pool(autoscale_idle_timeout=)
    reconcile_tick_interval: float | None = None  # refused
    shutdown_timeout: float | None = None  # Settings.stop_timeout
    console: bool | Literal["rich", "minimal", "log", "silent"] | None = None  # Pool(progress=)
    logging: bool = True  # accepted: skyhive logs through `logging`, configured by the program
    cluster: bool | None = None  # accepted: sky.dict & co. are always there (held by the client)
    retry_on_interruption: int | None = None  # refused: a call's own retries=
    health_checker: Any = None  # refused

    def __post_init__(self) -> None:
        for name, instead in _REFUSED.items():
            value = getattr(self, name)
            if value is not None:
                raise ValueError(f"sky.Options({name}={value!r}): skyhive has no such setting of a pool; "
                                 f"{instead}")
        for name in ("logging", "cluster"):
            value = getattr(self, name)
            if not (isinstance(value, bool) or (name == "cluster" and value is None)):
                raise TypeError(f"sky.Options({name}={value!r}): need True or False "
                                f"(skyhive has no {type(value).__name__} for it)")
        if self.console is not None and not isinstance(self.console, bool) and self.console not in _CONSOLE:
            raise ValueError(f"sky.Options(console={self.console!r}): need True, False or one of "
                             f"{', '.join(map(repr, _CONSOLE))}")

    def keywords(self) -> dict[str, Any]:
        """The Pool keywords (and Settings fields) these options give: only the fields not None."""
        given = {_MAPPED[f.name]: getattr(self, f.name) for f in fields(self)
                 if f.name in _MAPPED and getattr(self, f.name) is not None}
        if isinstance(given.get("progress"), str):
            given["progress"] = _CONSOLE[given["progress"]]
        return given


_GIVEN = ("selection", "worker", "progress", "autoscale_idle_timeout", "autoscale_cooldown")


def with_options(options: Any, *given: Any, settings: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`Pool(options=...)`: Pool's own keywords `selection, worker, progress, autoscale_idle_timeout,
    autoscale_cooldown` (None when not given) and its `settings` (`Settings` fields), with the options'
    fields added. Raises `TypeError` for what is not an Options, `ValueError` naming the field and the
    keyword when both are given."""
    if not isinstance(options, Options):
        hint = " (an instance: sky.Options(...))" if options is Options else ""
        raise TypeError(f"Pool(options={options!r}): need a sky.Options{hint} or None, got {type(options).__name__}")
    keywords, extra = dict(zip(_GIVEN, given, strict=True)), dict(settings)
    by_keyword = {keyword: field for field, keyword in _MAPPED.items()}
    for keyword, value in options.keywords().items():
        into = keywords if keyword in keywords else extra
        if into.get(keyword) is not None:
            field = by_keyword[keyword]
            raise ValueError(f"Pool(options=sky.Options({field}={value!r}), {keyword}={into[keyword]!r}): "
                             f"the same setting twice: give one of options.{field} and {keyword}=")
        into[keyword] = value
        log.debug("Pool(options=...): %s=%r becomes %s=%r", by_keyword[keyword], value, keyword, value)
    return tuple(keywords[k] for k in _GIVEN), extra
