"""Local nodes: worker processes on this machine (`sky.Local()`); `local_detached`: the same, serving a
Unix socket so that they outlive the client (a kept Local pool, `runtime/clusters/`). They share this
machine's Python and files: bootstrap checks the Image here (or builds it, `Local(build_env=True)`)."""

from ...nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind

KIND = NodeKind("local", "skyhive.runtime.kinds.local.transport:local_transport",
                bootstrap=BOOTSTRAP_OVER_SHELL, same_machine=True, keep="skyhive.runtime.kinds.local.keep:KEEP")
DETACHED = NodeKind("local_detached", "skyhive.runtime.kinds.local.detached:local_detached_transport",
                    bootstrap=BOOTSTRAP_OVER_SHELL, same_machine=True)
