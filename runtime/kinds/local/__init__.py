"""Local nodes: worker processes on this machine (`sky.Local()`); `local_detached`: the same, serving a
Unix socket so that they outlive the client (a kept Local pool, `runtime/clusters/`)."""

from ...nodes.registry import TransportKind

KIND = TransportKind("local", "skyhive.runtime.kinds.local.transport:local_transport",
                     bootstrap="skyhive.runtime.kinds.local.bootstrap:bootstrap_local",
                     keep="skyhive.runtime.kinds.local.keep:KEEP")
DETACHED = TransportKind("local_detached", "skyhive.runtime.kinds.local.detached:local_detached_transport",
                         bootstrap="skyhive.runtime.kinds.local.bootstrap:bootstrap_local")
