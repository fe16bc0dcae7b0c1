"""Slurm nodes: `srun` steps in the pool's allocation (`sky.Slurm`). Bootstrap is skyhive's over the
transport's shell: this machine's (Mode 1, a file system shared with the nodes) or the login node's
(Mode 2, whose home the nodes share). The nodes are other machines: not `same_machine`."""

from ...nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind

KIND = NodeKind("slurm", "skyhive.runtime.kinds.slurm.transport:srun_transport", bootstrap=BOOTSTRAP_OVER_SHELL)
