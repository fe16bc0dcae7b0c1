"""`InstanceInfo`: where this worker sits in its pool.

It travels as JSON in the `COMPUTE_POOL` environment variable of every worker (so child processes
of a task can read it too) and is what `skyhive.instance_info()` returns on a node.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["Peer", "InstanceInfo", "ENV_VAR", "RESTART_ENV"]

#: The environment variable that carries the JSON form of `InstanceInfo` on a worker.
ENV_VAR = "COMPUTE_POOL"
#: Set on a worker process restarted after a loss: how many times it was (absent on a first start).
RESTART_ENV = "SKYHIVE_WORKER_RESTARTS"


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    """One node of the pool, as its peers see it."""

    node: int
    addr: str
    accelerators: int = 0

    # Read as a mapping too, as the seeds' examples do: peer["private_ip"], peer["node"], peer.get(...)
    _KEYS = ("node", "private_ip", "public_ip", "accelerators")

    @property
    def private_ip(self) -> str:
        """The address peers use (`addr`)."""
        return self.addr

    @property
    def public_ip(self) -> None:
        """Not known to the node (the client reaches nodes its own way); always None."""
        return None

    def __getitem__(self, key: str) -> object:
        if key not in self._KEYS:
            raise KeyError(f"{key!r} (a peer has {', '.join(self._KEYS)})")
        return getattr(self, key)

    def get(self, key: str, default: object = None) -> object:
        return self[key] if key in self._KEYS else default

    def keys(self) -> tuple[str, ...]:
        return self._KEYS


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceInfo:
    """This worker's place in the pool.

    `node` counts nodes from 0 (node 0 is the head); `local_rank` counts worker processes on this
    node from 0; `rank = node * processes_per_node + local_rank` and `world_size = total_nodes *
    processes_per_node` are what distributed frameworks call rank and world size.
    """

    node: int
    total_nodes: int
    head_addr: str
    head_port: int
    pool_id: str
    accelerators: int = 0
    peers: tuple[Peer, ...] = field(default_factory=tuple)
    local_rank: int = 0
    processes_per_node: int = 1
    accelerator: str | None = None  # the accelerator model on this node ("A100"), None without one

    def __post_init__(self) -> None:
        if not 0 <= self.node < self.total_nodes:
            raise ValueError(f"node {self.node} is outside 0..{self.total_nodes - 1}")
        if not 0 <= self.local_rank < self.processes_per_node:
            raise ValueError(
                f"local_rank {self.local_rank} is outside 0..{self.processes_per_node - 1}"
            )

    @property
    def is_head(self) -> bool:
        """True on node 0."""
        return self.node == 0

    @property
    def rank(self) -> int:
        """Global rank of this worker process: `node * processes_per_node + local_rank`."""
        return self.node * self.processes_per_node + self.local_rank

    @property
    def world_size(self) -> int:
        """Number of worker processes in the pool: `total_nodes * processes_per_node`."""
        return self.total_nodes * self.processes_per_node

    # ---- the names the seeds' and Skyward's examples read -----------------------------------------

    @property
    def job_id(self) -> str:
        """The pool id (one pool = one job)."""
        return self.pool_id

    @property
    def hostname(self) -> str:
        """This machine's host name."""
        return os.uname().nodename  # what socket.gethostname() returns, without the socket module

    @property
    def worker(self) -> int:
        """This worker process's index on its node (`local_rank`)."""
        return self.local_rank

    @property
    def workers_per_node(self) -> int:
        """Worker processes per node (`processes_per_node`)."""
        return self.processes_per_node

    @property
    def global_worker_index(self) -> int:
        """This worker process's index in the pool (`rank`)."""
        return self.rank

    @property
    def total_workers(self) -> int:
        """Worker processes in the pool (`world_size`)."""
        return self.world_size

    @property
    def total_accelerators(self) -> int:
        """Accelerators in the whole pool (the sum over the peers)."""
        return sum(p.accelerators for p in self.peers) if self.peers else self.accelerators

    @property
    def network(self) -> dict[str, str]:
        """What this node's network looks like to its peers: `{"private_ip": ...}`."""
        mine = next((p.addr for p in self.peers if p.node == self.node), self.head_addr if self.is_head else "")
        return {"private_ip": mine}

    def to_json(self) -> str:
        """The JSON text exported as `COMPUTE_POOL`."""
        # the peers (the same tuple in every worker's info) are encoded once per pool, not once per
        # worker: at 10,000 nodes encoding them per worker was quadratic. "peers" comes last, so the
        # per-worker fields are at the front of the text.
        import json  # (here and below on use: a worker reads its info only when a task asks for it)

        data = asdict(replace(self, peers=()))
        del data["peers"]
        head = json.dumps(data, separators=(",", ":"))
        return f'{head[:-1]},"peers":{_peers_json(self.peers)}}}'



    @classmethod
    def from_json(cls, text: str) -> InstanceInfo:
        """Parse the JSON form; raises `ValueError` naming what is missing or wrong."""
        import json

        try:
            data = json.loads(text)
            peers = tuple(Peer(**p) for p in data.pop("peers", ()))
            return cls(peers=peers, **data)
        except (TypeError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError(f"{ENV_VAR} is not a valid InstanceInfo: {exc}") from None


_peers_cache: list[Any] = [None, ""]


def _peers_json(peers: tuple[Peer, ...]) -> str:
    """`peers` as JSON, remembered for the last tuple asked (every worker of a pool shares it)."""
    if _peers_cache[0] is not peers:
        import json

        _peers_cache[0] = peers
        _peers_cache[1] = json.dumps([asdict(p) for p in peers], separators=(",", ":"))
    return str(_peers_cache[1])
