"""Simulated nodes: real worker logic on the client's own event loop (`sky.Simulated`), so they share this
process's Python and files."""

from ...nodes.registry import NodeKind

KIND = NodeKind("simulated", "skyhive.runtime.kinds.simulated.transport:simulated_transport",
                bootstrap="skyhive.runtime.kinds.simulated.transport:bootstrap_simulated", same_machine=True)
