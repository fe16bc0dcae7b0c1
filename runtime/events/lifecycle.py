"""A node's lifecycle: its states and every legal transition between them, in one table."""

from __future__ import annotations

import enum
from ...errors import IllegalTransition

__all__ = ["NodeState", "TRANSITIONS", "IllegalTransition", "check_transition"]


class NodeState(str, enum.Enum):
    REQUESTED = "requested"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    CONNECTING = "connecting"
    BOOTSTRAPPING = "bootstrapping"
    READY = "ready"
    DRAINING = "draining"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


S = NodeState
TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    S.REQUESTED: frozenset({S.PROVISIONING, S.TERMINATING}),
    S.PROVISIONING: frozenset({S.RUNNING, S.TERMINATING}),
    S.RUNNING: frozenset({S.CONNECTING, S.TERMINATING}),
    S.CONNECTING: frozenset({S.BOOTSTRAPPING, S.TERMINATING}),
    S.BOOTSTRAPPING: frozenset({S.READY, S.TERMINATING}),
    S.READY: frozenset({S.DRAINING, S.TERMINATING}),
    S.DRAINING: frozenset({S.TERMINATING}),
    S.TERMINATING: frozenset({S.TERMINATED}),
    S.TERMINATED: frozenset(),
    # a failed node is still cleaned up: whatever the provider created is destroyed
    S.FAILED: frozenset({S.TERMINATING}),
}
# any live state may fail
for _s in S:
    if _s not in (S.TERMINATED, S.FAILED):
        TRANSITIONS[_s] = TRANSITIONS[_s] | {S.FAILED}


def check_transition(node: int, old: NodeState, new: NodeState) -> None:
    """Raise `IllegalTransition` unless `old -> new` is in the table."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"node {node}: illegal lifecycle transition {old.value} -> {new.value}")
