"""Timeouts and supervision limits of a pool, in one frozen record."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["Settings", "check_settings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every wait a pool makes is bounded by one of these (seconds unless said otherwise), and the
    content cache's budget (bytes)."""

    start_timeout: float = 120.0  # the provider's prepare/launch/wait_running, bootstrap, worker handshake
    build_timeout: float = 1800.0  # building an Image's environment on a node (venv, pip, apt, setup)
    heartbeat_interval: float = 2.0  # a Ping this often to an otherwise silent worker
    heartbeat_timeout: float = 20.0  # silent this long: the worker is declared lost and killed
    max_restarts: int = 3  # worker losses tolerated within restart_window before the node fails
    restart_window: float = 60.0
    restart_backoff: float = 0.2  # first restart delay, doubling, at most 5 s
    stop_timeout: float = 10.0  # plugin teardown and worker exit at pool close
    cancel_grace: float = 5.0  # a cancelled task must end this soon, or its worker is killed
    wait_for_worker: float = 30.0  # a call waits this long for a worker to (re)start
    # characters of task output the pool's event log keeps (then an OutputCapped marker; the terminal,
    # pool.output() and capture=True still get everything)
    log_output_limit: int = 64 * 1024 * 1024
    # content cache: each worker process keeps up to cache_bytes of the out-of-band buffers of at least
    # cache_min bytes it received (memfd pages, LRU), so the same big argument travels once (0: off)
    cache_bytes: int = 1 << 30
    cache_min: int = 1 << 20
    # shared memory with Local workers: the client keeps up to this many bytes of the memfds it filled
    # with large arguments, to fill them again once no worker uses them (a fresh memfd's pages cost
    # the kernel ~0.4 s per GiB to allocate and zero); closed with the pool (0: a fresh memfd each call)
    shm_pool_bytes: int = 2 << 30

    def __post_init__(self) -> None:
        check_settings({f.name: getattr(self, f.name) for f in fields(self)}, where="Settings")

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))


def check_settings(values: Mapping[str, Any], *, where: str) -> None:
    """Raise `TypeError`/`ValueError` naming the first bad value among `values` (a subset of the
    fields, as `where(name=value)`): a whole number for the counts and byte sizes, a number for the
    rest; none negative, none NaN (which every comparison would let through: a NaN
    `heartbeat_timeout` never declares a worker lost). Infinity is a bound that never ends."""
    kinds = {f.name: f.type for f in fields(Settings)}
    defaults = {f.name: f.default for f in fields(Settings)}
    for name, value in values.items():
        if name not in kinds:
            continue  # unknown names are the caller's to refuse
        whole = kinds[name] == "int"
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            need = "a whole number" if whole else "a number of seconds"
            raise TypeError(f"{where}({name}={value!r}): need {need}, got {type(value).__name__}")
        if math.isnan(value) or value < 0:
            raise ValueError(f"{where}({name}={value!r}): {name} must be >= 0 (and a number: not NaN)")
        if name == "heartbeat_interval" and value == 0:
            raise ValueError(f"{where}(heartbeat_interval=0): the heartbeat clock needs a positive interval")
    interval = values.get("heartbeat_interval", defaults["heartbeat_interval"])
    timeout = values.get("heartbeat_timeout", defaults["heartbeat_timeout"])
    if timeout <= interval:
        raise ValueError(f"{where}(heartbeat_timeout={timeout!r}): must be longer than "
                         f"heartbeat_interval={interval!r}")
