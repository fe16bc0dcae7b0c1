"""Simulated nodes: real worker logic on the client's own event loop (`sky.Simulated`)."""

from ...nodes.registry import TransportKind

KIND = TransportKind("simulated", "skyhive.runtime.kinds.simulated.transport:simulated_transport",
                     bootstrap="skyhive.runtime.kinds.simulated.transport:bootstrap_simulated")
