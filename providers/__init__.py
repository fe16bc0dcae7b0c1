"""Where nodes come from: Local, SSH (your own hosts), clouds through apache-libcloud, Simulated."""

from .base import ClusterSpec as ClusterSpec
from .base import NodeHandle as NodeHandle
from .base import Provider as Provider
from .base import ProvisionError as ProvisionError
from .local import Local as Local

__all__ = ["ClusterSpec", "NodeHandle", "Provider", "ProvisionError", "Local"]
