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

_EXPORTS = {  # (not annotated: `dict` is also a public name of this module, Skyward's sky.dict)
    "Pool": "skyhive.runtime.pool",
    "ComputePool": "skyhive.runtime.pool",
    "Compute": "skyhive.runtime.pool",
    "AcceleratorWarning": "skyhive.providers.accelerators",
    "PipIndex": "skyhive.plugins.image",
    "function": "skyhive.runtime.compute",
    "Worker": "skyhive.runtime.concurrency",
    "Options": "skyhive.runtime.options",
    "preload": "skyhive.runtime.preload",
    "Spec": "skyhive.runtime.spec",
    "PendingCompute": "skyhive.runtime.compute",
    "PendingFunction": "skyhive.runtime.compute",
    "sky": "skyhive.runtime.common.active",
    # Skyward's distributed collections (docs/collections.md)
    "dict": "skyhive.runtime.collections.api",
    "set": "skyhive.runtime.collections.api",
    "counter": "skyhive.runtime.collections.api",
    "queue": "skyhive.runtime.collections.api",
    "barrier": "skyhive.runtime.collections.api",
    "lock": "skyhive.runtime.collections.api",
    "Local": "skyhive.providers.local",
    "SSH": "skyhive.providers.ssh",
    "Slurm": "skyhive.providers.slurm",
    "Simulated": "skyhive.providers.simulated",
    "Kubernetes": "skyhive.providers.kubernetes",
    "AWS": "skyhive.providers.cloud.aws",
    "GCP": "skyhive.providers.cloud.gcp",
    "DigitalOcean": "skyhive.providers.cloud.digitalocean",
    "Azure": "skyhive.providers.cloud.azure",
    "Image": "skyhive.plugins.image",
    "Bucket": "skyhive.runtime.storage.spec",
    "checkpoint_dir": "skyhive.runtime.storage.checkpoint",
    "compute": "skyhive.runtime.compute",
    "gather": "skyhive.runtime.compute",
    "main": "skyhive.runtime.compute",  # Skyward's @sky.main
    "instance_info": "skyhive.runtime.onnode.instance",
    "InstanceInfo": "skyhive.protocol.info",
    "Peer": "skyhive.protocol.info",
    "shard": "skyhive.runtime.onnode.shard",
    "stdout": "skyhive.runtime.onnode.filters",
    "stderr": "skyhive.runtime.onnode.filters",
    "silent": "skyhive.runtime.onnode.filters",
    "OutputRecord": "skyhive.runtime.output.router",
    "Captured": "skyhive.runtime.output.captured",
    # every error a user can catch (the tree is drawn in skyhive/errors.py)
    "SkyhiveError": "skyhive.errors",
    "StorageError": "skyhive.errors",
    "ProtocolError": "skyhive.errors",
    "ProvisionError": "skyhive.errors",
    "NodeUnreachable": "skyhive.errors",
    "CloudAPIError": "skyhive.errors",
    "SSHError": "skyhive.errors",
    "SlurmError": "skyhive.errors",
    "SlurmUnreachable": "skyhive.errors",
    "HostUnreachable": "skyhive.errors",
    "HostKeyChanged": "skyhive.errors",
    "AuthenticationFailed": "skyhive.errors",
    "BootstrapError": "skyhive.errors",
    "PythonMismatch": "skyhive.errors",
    "SetupFailed": "skyhive.errors",
    "ProviderNotAvailable": "skyhive.errors",
    "TeardownIncomplete": "skyhive.errors",
    "NoSSH": "skyhive.errors",
    "WorkerLost": "skyhive.errors",
    "TaskTimeout": "skyhive.errors",
    "RemoteError": "skyhive.errors",
    "SerializationError": "skyhive.errors",
    "PoolClosed": "skyhive.errors",
    "OutputStalled": "skyhive.errors",
    "EventsStalled": "skyhive.errors",
    "NotOnNodeError": "skyhive.errors",
    "TaskFileError": "skyhive.errors",
    "LaunchError": "skyhive.errors",
    "PoolNotFound": "skyhive.errors",
    "PoolInUse": "skyhive.errors",
    "PoolExists": "skyhive.errors",
    "PoolGone": "skyhive.errors",
    "WorkerRestarted": "skyhive.errors",
    "CoordinatorPortInUse": "skyhive.errors",
    "KerasBackendMismatch": "skyhive.errors",
    "HuggingFaceLoginError": "skyhive.errors",
    "ManagedJobError": "skyhive.errors",
}
_SUBMODULES = {"plugins": "skyhive.plugins", "accelerators": "skyhive.providers.accelerators",
               "integrations": "skyhive.integrations", "jobs": "skyhive.jobs"}

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
    from skyhive import integrations as integrations
    from skyhive import jobs as jobs
    from skyhive.plugins.image import PipIndex as PipIndex
    from skyhive.providers import accelerators as accelerators
    from skyhive.providers.accelerators import AcceleratorWarning as AcceleratorWarning
    from skyhive.runtime.compute import function as function
    from skyhive.runtime.concurrency import Worker as Worker
    from skyhive.runtime.options import Options as Options
    from skyhive.runtime.spec import Spec as Spec
    from skyhive.runtime.compute import PendingCompute as PendingCompute
    from skyhive.runtime.compute import PendingFunction as PendingFunction
    from skyhive.runtime.common.active import sky as sky
    from skyhive.runtime.collections.api import barrier as barrier
    from skyhive.runtime.collections.api import counter as counter
    from skyhive.runtime.collections.api import dict as dict
    from skyhive.runtime.collections.api import lock as lock
    from skyhive.runtime.collections.api import queue as queue
    from skyhive.runtime.collections.api import set as set
    from skyhive.runtime.storage.spec import Bucket as Bucket
    from skyhive.runtime.storage.checkpoint import checkpoint_dir as checkpoint_dir
    from skyhive.errors import StorageError as StorageError
    from skyhive.runtime.pool import Compute as Compute
    from skyhive.runtime.pool import ComputePool as ComputePool
    from skyhive.providers.simulated import Simulated as Simulated
    from skyhive.providers.kubernetes import Kubernetes as Kubernetes
    from skyhive.errors import AuthenticationFailed as AuthenticationFailed
    from skyhive.errors import BootstrapError as BootstrapError
    from skyhive.errors import CloudAPIError as CloudAPIError
    from skyhive.errors import CoordinatorPortInUse as CoordinatorPortInUse
    from skyhive.errors import HostKeyChanged as HostKeyChanged
    from skyhive.errors import HostUnreachable as HostUnreachable
    from skyhive.errors import HuggingFaceLoginError as HuggingFaceLoginError
    from skyhive.errors import ManagedJobError as ManagedJobError
    from skyhive.errors import KerasBackendMismatch as KerasBackendMismatch
    from skyhive.errors import LaunchError as LaunchError
    from skyhive.errors import NodeUnreachable as NodeUnreachable
    from skyhive.errors import NotOnNodeError as NotOnNodeError
    from skyhive.errors import OutputStalled as OutputStalled
    from skyhive.errors import EventsStalled as EventsStalled
    from skyhive.errors import PoolClosed as PoolClosed
    from skyhive.errors import PoolExists as PoolExists
    from skyhive.errors import PoolGone as PoolGone
    from skyhive.errors import PoolInUse as PoolInUse
    from skyhive.errors import PoolNotFound as PoolNotFound
    from skyhive.errors import TeardownIncomplete as TeardownIncomplete
    from skyhive.errors import NoSSH as NoSSH
    from skyhive.errors import ProtocolError as ProtocolError
    from skyhive.errors import ProviderNotAvailable as ProviderNotAvailable
    from skyhive.errors import ProvisionError as ProvisionError
    from skyhive.errors import PythonMismatch as PythonMismatch
    from skyhive.errors import RemoteError as RemoteError
    from skyhive.errors import SlurmError as SlurmError
    from skyhive.errors import SlurmUnreachable as SlurmUnreachable
    from skyhive.errors import SSHError as SSHError
    from skyhive.errors import SerializationError as SerializationError
    from skyhive.errors import SetupFailed as SetupFailed
    from skyhive.errors import SkyhiveError as SkyhiveError
    from skyhive.errors import TaskFileError as TaskFileError
    from skyhive.errors import TaskTimeout as TaskTimeout
    from skyhive.errors import WorkerLost as WorkerLost
    from skyhive.errors import WorkerRestarted as WorkerRestarted
    from skyhive.plugins.image import Image as Image
    from skyhive.protocol.info import InstanceInfo as InstanceInfo
    from skyhive.protocol.info import Peer as Peer
    from skyhive.providers.cloud.aws import AWS as AWS
    from skyhive.providers.cloud.azure import Azure as Azure
    from skyhive.providers.cloud.digitalocean import DigitalOcean as DigitalOcean
    from skyhive.providers.cloud.gcp import GCP as GCP
    from skyhive.providers.local import Local as Local
    from skyhive.providers.slurm import Slurm as Slurm
    from skyhive.providers.ssh import SSH as SSH
    from skyhive.runtime.compute import compute as compute
    from skyhive.runtime.compute import gather as gather
    from skyhive.runtime.compute import main as main
    from skyhive.runtime.onnode.instance import instance_info as instance_info
    from skyhive.runtime.onnode.filters import silent as silent
    from skyhive.runtime.onnode.filters import stderr as stderr
    from skyhive.runtime.onnode.filters import stdout as stdout
    from skyhive.runtime.onnode.shard import shard as shard
    from skyhive.runtime.output.captured import Captured as Captured
    from skyhive.runtime.output.router import OutputRecord as OutputRecord
    from skyhive.runtime.pool import Pool as Pool
    from skyhive.runtime.preload import preload as preload
