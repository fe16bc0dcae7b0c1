"""`sky.plugins.jax()`: JAX on the nodes, with `jax.distributed` initialized once per worker process.

`around_app` exports `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID` and
`JAX_LOCAL_DEVICE_COUNT`, calls `jax.distributed.initialize()` and, at pool exit,
`jax.distributed.shutdown()`. After it, `jax.devices()` lists every process's devices and the
cross-process collectives (`multihost_utils.process_allgather`, `pjit` over a global mesh) work; on
CPU they travel over gloo.

The coordinator's port. `head_port` is torch's (its TCPStore listens there), so the coordinator
needs another one: on a Local pool — where the head is this machine — `transform` picks a free port
here and passes it in the image's environment (`SKYHIVE_JAX_PORT`); on other providers it is
`head_port + 1`. The coordinator binds it on all interfaces and, if it cannot, JAX does not raise: every
process would wait for the full timeout. So the process that hosts it checks the port first and
fails at once, saying which port is taken.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import CoordinatorPortInUse
from .api import InstanceInfo, Plugin, PoolView, refuse_if_restarted

if TYPE_CHECKING:
    from .image import Image

__all__ = ["JaxPlugin", "jax", "jax_env", "coordinator_port", "PORT_ENV", "CoordinatorPortInUse"]

#: The image variable that carries the coordinator's port, when `transform` chose it.
PORT_ENV = "SKYHIVE_JAX_PORT"


def coordinator_port(info: InstanceInfo, env: Any = os.environ) -> int:
    """The coordinator's port: `SKYHIVE_JAX_PORT` when set, else `head_port + 1`."""
    return int(env.get(PORT_ENV) or info.head_port + 1)


def jax_env(info: InstanceInfo, port: int) -> dict[str, str]:
    """The `JAX_*` variables for the worker process `info` describes."""
    return {
        "JAX_COORDINATOR_ADDRESS": f"{info.head_addr}:{port}",
        "JAX_NUM_PROCESSES": str(info.world_size),
        "JAX_PROCESS_ID": str(info.rank),
        "JAX_LOCAL_DEVICE_COUNT": str(_local_devices(info)),
    }


def _local_devices(info: InstanceInfo) -> int:
    """Accelerators this process drives: the node's share, at least one (the CPU)."""
    return max(1, info.accelerators // info.processes_per_node)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_port_free(port: int) -> None:
    """Raise `CoordinatorPortInUse` if something on this host listens on (or holds) `port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # like the coordinator's server
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise CoordinatorPortInUse(
                f"jax plugin: port {port} on the head node is in use, so the JAX coordinator cannot "
                f"listen there (it is head_port + 1, or ${PORT_ENV} when set): free it or set "
                f"{PORT_ENV} in the pool's Image env to another port"
            ) from None


class JaxPlugin(Plugin):
    """See `jax()`. A plain object: it is pickled to the workers and imports jax only there."""

    name = "jax"

    def __init__(self, *, package: str = "jax", timeout: float = 300.0) -> None:
        if not isinstance(package, str) or not package.strip():
            raise ValueError(f"jax(package={package!r}): give a pip requirement such as \"jax[cuda12]\"")
        if timeout <= 0:
            raise ValueError(f"jax(timeout={timeout!r}): need a positive number of seconds")
        self.package = package
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<plugin jax {self.package}>"

    def transform(self, image: Image, pool: PoolView | None) -> Image:
        """Add the jax package; on a pool whose nodes are this machine (Local), pick the coordinator's
        port (see the module)."""
        image = image.with_pip(self.package)
        if pool is not None and pool.same_machine and PORT_ENV not in image.env:
            image = image.with_env(**{PORT_ENV: str(_free_port())})
        return image

    @contextlib.contextmanager
    def around_app(self, info: InstanceInfo) -> Iterator[None]:
        """Once per worker process: export the `JAX_*` variables and join the distributed runtime.

        A pool of one process in all gets the variables only. Raises `WorkerRestarted` in a worker
        process restarted after a crash (the other processes are still in the old runtime), and
        `CoordinatorPortInUse` on rank 0 when the coordinator's port is taken.
        """
        port = coordinator_port(info)
        env = jax_env(info, port)
        os.environ.update(env)
        if info.world_size < 2:
            yield
            return
        refuse_if_restarted("jax", info)
        if info.rank == 0:
            check_port_free(port)
        import jax as _jax

        local_ids = None
        if info.accelerators and info.processes_per_node > 1:
            n = _local_devices(info)
            local_ids = list(range(info.local_rank * n, (info.local_rank + 1) * n))
        _jax.distributed.initialize(
            coordinator_address=env["JAX_COORDINATOR_ADDRESS"], num_processes=info.world_size,
            process_id=info.rank, local_device_ids=local_ids,
            initialization_timeout=max(1, int(self.timeout)),
            # at pool exit every process shuts down at once; do not outlast the pool's stop_timeout
            shutdown_timeout_seconds=max(1, int(min(self.timeout, 10))),
        )
        try:
            yield
        finally:
            _jax.distributed.shutdown()


def jax(*, package: str = "jax", timeout: float = 300.0) -> JaxPlugin:
    """JAX, with `jax.distributed.initialize()` called on every worker process of the pool.

    - `package`: the pip requirement to add (`"jax[cuda12]"` on NVIDIA nodes).
    - `timeout`: seconds the processes wait for each other when they start (the pool's
      `start_timeout` bounds the start as well).

    Raises `ValueError` for an empty package or a non-positive timeout.
    """
    return JaxPlugin(package=package, timeout=timeout)
