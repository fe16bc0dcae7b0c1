"""Timeouts and supervision limits of a pool, in one frozen record."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Settings"]


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
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value < 0:
                raise ValueError(f"Settings.{f.name} must be >= 0, got {value!r}")
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError("Settings.heartbeat_timeout must be longer than heartbeat_interval")

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))
