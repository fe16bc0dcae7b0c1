"""SSH nodes: hosts reached over SSH (`sky.SSH`, and every cloud's instances)."""

from ...nodes.registry import TransportKind

KIND = TransportKind("ssh", "skyhive.runtime.kinds.ssh.transport:ssh_transport",
                     bootstrap="skyhive.runtime.kinds.ssh.bootstrap:bootstrap_node",
                     keep="skyhive.runtime.kinds.ssh.keep:KEEP")
