"""Reach kind "simulated": served by the in-memory transport (registered when imported, see `registry`)."""

from .memory import bootstrap, make_transport
from .registry import register_transport

register_transport("simulated", make_transport, bootstrap=bootstrap)
