"""Slurm nodes: `srun` steps in the pool's allocation (`sky.Slurm`)."""

from ...nodes.registry import TransportKind

KIND = TransportKind("slurm", "skyhive.runtime.kinds.slurm.transport:srun_transport",
                     bootstrap="skyhive.runtime.kinds.slurm.transport:bootstrap_srun")
