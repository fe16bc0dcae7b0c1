"""SSH nodes: hosts reached over SSH (`sky.SSH`, and every cloud's instances); bootstrap builds the Image on
each host over its `SSHShell`."""

from ...nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind

KIND = NodeKind("ssh", "skyhive.runtime.kinds.ssh.transport:ssh_transport", bootstrap=BOOTSTRAP_OVER_SHELL,
                keep="skyhive.runtime.kinds.ssh.keep:KEEP")
