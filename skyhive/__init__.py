"""skyhive: run Python functions on a pool of machines and get the results back.

    import skyhive as sky

    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        results = await pool.broadcast(fn, x)

See README.md and docs/ for the guide; every name in `__all__` is part of the public API.

Names are imported on first use, so that `import skyhive` stays cheap on worker processes (which need
`instance_info` and `shard`, not the client's pool machinery).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Pool": "skyhive.runtime.pool",
    "ComputePool": "skyhive.runtime.pool",
    "Compute": "skyhive.runtime.pool",
    "AcceleratorWarning": "skyhive.providers.accelerators",
    "PipIndex": "skyhive.plugins.image",
    "function": "skyhive.runtime.compute",
    "Local": "skyhive.providers.local",
    "SSH": "skyhive.providers.ssh",
    "Image": "skyhive.plugins.image",
    "compute": "skyhive.runtime.compute",
    "gather": "skyhive.runtime.compute",
    "instance_info": "skyhive.runtime.onnode.context",
    "NotOnNodeError": "skyhive.runtime.onnode.context",
    "InstanceInfo": "skyhive.protocol.info",
    "Peer": "skyhive.protocol.info",
    "shard": "skyhive.runtime.onnode.shard",
    "stdout": "skyhive.runtime.onnode.filters",
    "stderr": "skyhive.runtime.onnode.filters",
    "silent": "skyhive.runtime.onnode.filters",
    "OutputRecord": "skyhive.runtime.output.router",
    "OutputStalled": "skyhive.runtime.output.router",
    "Captured": "skyhive.runtime.output.captured",
    "SkyhiveError": "skyhive.protocol.errors",
    "ProtocolError": "skyhive.protocol.errors",
    "ProvisionError": "skyhive.providers.base",
    "WorkerLost": "skyhive.runtime.errors",
    "TaskTimeout": "skyhive.runtime.errors",
    "RemoteError": "skyhive.runtime.errors",
    "SerializationError": "skyhive.runtime.errors",
    "PoolClosed": "skyhive.runtime.errors",
}
_SUBMODULES = {"plugins": "skyhive.plugins", "accelerators": "skyhive.providers.accelerators",
               "integrations": "skyhive.plugins.integrations"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(import_module(module), name)
    elif name in _SUBMODULES:
        value = import_module(_SUBMODULES[name])
    else:
        raise AttributeError(f"module 'skyhive' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from skyhive import plugins as plugins
    from skyhive.plugins import integrations as integrations
    from skyhive.plugins.image import PipIndex as PipIndex
    from skyhive.providers import accelerators as accelerators
    from skyhive.providers.accelerators import AcceleratorWarning as AcceleratorWarning
    from skyhive.runtime.compute import function as function
    from skyhive.runtime.pool import Compute as Compute
    from skyhive.runtime.pool import ComputePool as ComputePool
    from skyhive.plugins.image import Image as Image
    from skyhive.protocol.errors import ProtocolError as ProtocolError
    from skyhive.protocol.errors import SkyhiveError as SkyhiveError
    from skyhive.protocol.info import InstanceInfo as InstanceInfo
    from skyhive.protocol.info import Peer as Peer
    from skyhive.providers.base import ProvisionError as ProvisionError
    from skyhive.providers.local import Local as Local
    from skyhive.providers.ssh import SSH as SSH
    from skyhive.runtime.output.captured import Captured as Captured
    from skyhive.runtime.compute import compute as compute
    from skyhive.runtime.compute import gather as gather
    from skyhive.runtime.onnode.context import NotOnNodeError as NotOnNodeError
    from skyhive.runtime.onnode.context import instance_info as instance_info
    from skyhive.runtime.errors import PoolClosed as PoolClosed
    from skyhive.runtime.errors import RemoteError as RemoteError
    from skyhive.runtime.errors import SerializationError as SerializationError
    from skyhive.runtime.errors import TaskTimeout as TaskTimeout
    from skyhive.runtime.errors import WorkerLost as WorkerLost
    from skyhive.runtime.onnode.filters import silent as silent
    from skyhive.runtime.onnode.filters import stderr as stderr
    from skyhive.runtime.onnode.filters import stdout as stdout
    from skyhive.runtime.output.router import OutputRecord as OutputRecord
    from skyhive.runtime.output.router import OutputStalled as OutputStalled
    from skyhive.runtime.pool import Pool as Pool
    from skyhive.runtime.onnode.shard import shard as shard
