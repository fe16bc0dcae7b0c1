"""Kubernetes nodes: pods (`sky.Kubernetes`), reached over `pods/exec` — no sshd in the pod, no port opened;
bootstrap builds the Image in each pod over its `PodShell`; a kept pool's pods are reached through the keep
support's access (`keep.py`: an interactive exec for `skyhive ssh`, a port-forward for `forward`)."""

from ...nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind

KIND = NodeKind("kubernetes", "skyhive.runtime.kinds.kubernetes.transport:kubernetes_transport",
                bootstrap=BOOTSTRAP_OVER_SHELL, keep="skyhive.runtime.kinds.kubernetes.keep:KEEP")
