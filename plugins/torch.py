"""`sky.plugins.torch()`: PyTorch on the nodes, and its process group set up once per worker process.

Client side, `transform` adds torch (and torchvision/torchaudio when asked) to the image, with the
PyTorch wheel index that matches the pool: the CUDA one when the pool's accelerator is an NVIDIA GPU,
the CPU one otherwise (on Local: this machine's GPUs, not the accelerator asked for). On the worker, `around_app` exports the variables `torchrun` would
(`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `NODE_RANK`),
joins the process group once (what `init_process_group(init_method="env://")` does, but with rank
0's rendezvous store bound to `MASTER_ADDR` only) and, at pool exit, calls `destroy_process_group()`.
Unless `OMP_NUM_THREADS` is set, it also divides the host's cores among the worker processes that
share it (torchrun sets one thread each): oversubscribed cores make every all-reduce wait.

The pure parts (`requirement`, `wheel_index`, `distributed_env`) are module functions so they can be
tested, and reused by other plugins, without torch installed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import WorkerRestarted
from ..protocol.info import RESTART_ENV
from .api import InstanceInfo, Plugin, PoolView, refuse_if_restarted, requirement

if TYPE_CHECKING:
    from .image import Image

__all__ = ["TorchPlugin", "torch", "requirement", "wheel_index", "is_cuda", "distributed_env", "rendezvous_listener",
           "threads_per_process", "WorkerRestarted", "RESTART_ENV"]

log = logging.getLogger("skyhive.plugins.torch")

INDEX = "https://download.pytorch.org/whl/{flavour}"
BACKENDS = ("nccl", "gloo", "mpi", "ucc", "xccl")

_CUDA_TAG = re.compile(r"cu\d{2,4}\Z")
# GPU families sold by NVIDIA, as accelerator names spell them ("A100", "H100-80GB", "T4", "RTX4090").
_NVIDIA = re.compile(r"(nvidia|tesla|geforce|quadro|rtx|gtx|titan|g[bh]\d{3}|v100|[abhltkp]\d{1,3}(?!\d))",
                     re.IGNORECASE)


def is_cuda(accelerator: Any) -> bool:
    """True when `accelerator` (a pool's accelerator: None, a name, or an object) is an NVIDIA GPU.

    An object may say so itself with a truthy `cuda` attribute (or `cuda=False` to say it is not);
    a name is matched against NVIDIA's GPU families ("A100", "H100", "T4", "L4", "RTX4090", ...).
    """
    if accelerator is None or accelerator is False:
        return False
    flag = getattr(accelerator, "cuda", None)
    if flag is not None:
        return bool(flag)
    vendor = getattr(accelerator, "manufacturer", None) or getattr(accelerator, "vendor", None)
    if isinstance(vendor, str):
        return vendor.strip().lower() == "nvidia"
    name = getattr(accelerator, "name", accelerator)
    return isinstance(name, str) and bool(_NVIDIA.match(name.strip()))


def wheel_index(cuda: str, accelerator: Any) -> str:
    """PyTorch's wheel index for the pool: `whl/<cuda>` on an NVIDIA accelerator, else `whl/cpu`."""
    return INDEX.format(flavour=cuda if is_cuda(accelerator) else "cpu")


def distributed_env(info: InstanceInfo) -> dict[str, str]:
    """The variables `torchrun` sets, for the worker process `info` describes."""
    return {
        "MASTER_ADDR": info.head_addr,
        "MASTER_PORT": str(info.head_port),
        "WORLD_SIZE": str(info.world_size),
        "RANK": str(info.rank),
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(info.processes_per_node),
        "NODE_RANK": str(info.node),
    }


def rendezvous_listener(addr: str, port: int) -> socket.socket | None:
    """A TCP socket bound to `addr:port` (not listening yet) for rank 0's rendezvous store, so that
    it serves the pool's own address only; None when `addr` is not an address of this host (behind
    NAT, say): torch then binds the store to all interfaces, as it does by default."""
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    family, type_, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRNOTAVAIL:
            log.warning("torch rendezvous: %s is not an address of this host; the store on port %d "
                        "listens on all interfaces", addr, port)
            return None
        raise
    return sock


def threads_per_process(info: InstanceInfo, cpus: int | None = None) -> int:
    """CPU threads for each worker process, so that the processes sharing this host do not
    oversubscribe its cores (torchrun sets 1; this divides the cores among the processes).

    The processes sharing the host are this node's, times the nodes at the same address (the
    Local provider's nodes all live on one machine).
    """
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
    here = info.peers[info.node].addr if info.node < len(info.peers) else None
    nodes_here = sum(1 for p in info.peers if p.addr == here) or 1
    return max(1, cpus // (nodes_here * info.processes_per_node))


class TorchPlugin(Plugin):
    """See `torch()`. A plain object: it is pickled to the workers and imports torch only there."""

    name = "torch"

    def __init__(self, backend: str | None = None, cuda: str = "cu128", version: str = "latest",
                 vision: str | None = None, audio: str | None = None,
                 timeout: float | None = None) -> None:
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"torch(backend={backend!r}): use one of {', '.join(BACKENDS)}, or None to pick")
        if not isinstance(cuda, str) or not _CUDA_TAG.match(cuda):
            raise ValueError(f"torch(cuda={cuda!r}): give a CUDA wheel tag such as \"cu128\"")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"torch(timeout={timeout!r}): need a positive number of seconds")
        self.backend = backend
        self.cuda = cuda
        self.requirements = tuple(
            r for r in (requirement("torch", version, where="torch(version=...)"),
                        requirement("torchvision", vision, where="torch(vision=...)"),
                        requirement("torchaudio", audio, where="torch(audio=...)"))
            if r is not None
        )
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<plugin torch {' '.join(self.requirements)} backend={self.backend or 'auto'}>"

    # -- client side ---------------------------------------------------------------------------

    def transform(self, image: Image, pool: PoolView | None) -> Image:
        """Add the torch packages and the wheel index for the pool's accelerator (CPU if none). A pool
        whose nodes are this machine (Local) runs on its GPUs whatever it asked for (Local warns when
        they differ), so there the index follows this machine: CUDA wheels only where `nvidia-smi`
        lists a GPU."""
        if pool is not None and pool.same_machine:
            from ..providers.accelerators import local_devices

            index = INDEX.format(flavour=self.cuda if local_devices() else "cpu")
        else:
            index = wheel_index(self.cuda, pool.accelerator if pool is not None else None)
        return image.with_pip(*self.requirements).with_pip_indexes(index)

    # -- worker side ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def around_app(self, info: InstanceInfo) -> Iterator[None]:
        """Once per worker process: export the distributed variables and join the process group.

        A pool of one process in all gets the variables but no process group. If the group is
        already initialized (by user code or another plugin) it is used and left alone at exit.
        Raises `WorkerRestarted` in a process restarted after a crash (see docs/plugins.md).
        """
        os.environ.update(distributed_env(info))
        if info.world_size < 2:
            yield
            return
        refuse_if_restarted("torch", info)
        threads = None
        if "OMP_NUM_THREADS" not in os.environ:  # before torch loads OpenMP, like torchrun does
            threads = threads_per_process(info)
            os.environ["OMP_NUM_THREADS"] = str(threads)
        import torch as _torch
        import torch.distributed as dist

        if threads is not None:
            _torch.set_num_threads(threads)  # in case torch was imported already

        if dist.is_initialized():
            yield
            return
        backend = self.backend or ("nccl" if _torch.cuda.is_available() else "gloo")
        kwargs: dict[str, Any] = {}
        if self.timeout is not None:
            kwargs["timeout"] = timedelta(seconds=self.timeout)
        if backend == "nccl" and _torch.cuda.is_available():
            _torch.cuda.set_device(info.local_rank % max(1, _torch.cuda.device_count()))
        # the rendezvous store torch's env:// would make, but rank 0's bound to MASTER_ADDR only
        # (torch binds it to every interface); the other ranks connect to it as env:// would
        listener = rendezvous_listener(info.head_addr, info.head_port) if info.rank == 0 else None
        try:
            store = dist.TCPStore(
                info.head_addr, info.head_port, info.world_size, is_master=info.rank == 0,
                timeout=kwargs.get("timeout", _default_timeout()),
                **({"master_listen_fd": listener.fileno()} if listener is not None else {}),
            )
            dist.init_process_group(backend=backend, store=store, rank=info.rank, world_size=info.world_size,
                                    **kwargs)
            try:
                yield
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()
        finally:
            if listener is not None:
                listener.close()


def _default_timeout() -> timedelta:
    from torch.distributed.constants import default_pg_timeout

    return default_pg_timeout


def torch(backend: str | None = None, cuda: str = "cu128", version: str = "latest",
          vision: str | None = None, audio: str | None = None, *,
          timeout: float | None = None) -> TorchPlugin:
    """PyTorch, with `torch.distributed` initialized on every worker process of the pool.

    - `backend`: "nccl", "gloo" (or another torch backend); None picks nccl when CUDA is available
      on the worker, gloo otherwise.
    - `cuda`: the CUDA wheel tag ("cu128") used when the pool's accelerator is an NVIDIA GPU; other
      pools get the CPU wheels (`https://download.pytorch.org/whl/cpu`).
    - `version`, `vision`, `audio`: torch, torchvision, torchaudio versions: "latest" (no pin), a
      bare version ("2.3.0" -> "==2.3.0") or a constraint (">=2.3", passed through). `vision` and
      `audio` default to None: not installed.
    - `timeout`: seconds for `init_process_group(timeout=...)` (rendezvous and collectives);
      None keeps torch's default.

    Raises `ValueError` for a bad backend, CUDA tag, version or timeout.
    """
    return TorchPlugin(backend=backend, cuda=cuda, version=version, vision=vision, audio=audio,
                       timeout=timeout)
