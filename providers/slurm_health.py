"""What the Slurm controller says about the nodes of a pool's allocation while its workers run
(`Slurm.node_problem`, see `Provider.node_problem`).

A Slurm node can be lost while its worker still answers: when the node's `slurmd` dies, the job step
(`slurmstepd` and the worker under it) goes on, but the controller soon flags the node as not
responding (`sinfo` shows its state with a `*`), then marks it DOWN and ends the whole job
(`SlurmdTimeout` later) — the worker's srun then just exits 0, which says nothing. Asking the
controller every heartbeat names the node and the cause as soon as Slurm knows it.

One `sinfo` answers for every node the provider's pools use, at most once per `max_age` seconds
however many nodes ask.
"""

from __future__ import annotations

import logging
import time

import anyio

from .slurm_cmd import CommandRunner, SlurmUnreachable

__all__ = ["NodeHealth", "problem_of"]

log = logging.getLogger("skyhive.providers.slurm")

#: Node states (sinfo's %T, lower case, without the flag suffixes) in which a running job there is lost.
_LOST = ("down", "fail")


def problem_of(name: str, state: str, reason: str) -> str | None:
    """The sentence for node `name` in sinfo's `state` ("allocated*", "down*", "mixed") with Slurm's
    `reason`, or None when its jobs go on."""
    base = state.rstrip("*~#!%$@^-+")
    if not state.endswith("*") and base not in _LOST:
        return None
    why = "does not respond to the Slurm controller (its slurmd is gone)" if state.endswith("*") else "is down"
    said = f"; Slurm's reason: {reason}" if reason and reason.lower() != "none" else ""
    return f"Slurm node {name} {why} (state {state}{said})"


class NodeHealth:
    """The controller's view of nodes, shared by the nodes that ask (one `sinfo` per `max_age`)."""

    def __init__(self, runner: CommandRunner, *, timeout: float, max_age: float = 1.0) -> None:
        self.runner = runner
        self.timeout = timeout
        self.max_age = max_age
        self.names: set[str] = set()
        self._states: dict[str, tuple[str, str]] = {}
        self._polled = -1e9
        self._lock = anyio.Lock()

    async def problem(self, name: str) -> str | None:
        """Why node `name` is lost per the controller, or None (also when the controller cannot be asked
        right now: that is no evidence against the node)."""
        self.names.add(name)
        async with self._lock:
            if time.monotonic() - self._polled >= self.max_age or name not in self._states:
                await self._poll()
        state, reason = self._states.get(name, ("", ""))
        return problem_of(name, state, reason) if state else None

    async def _poll(self) -> None:
        argv = ("sinfo", "-h", "-N", "-n", ",".join(sorted(self.names)), "-o", "%N|%T|%E")
        try:
            with anyio.fail_after(self.timeout):
                done = await self.runner.run(argv, timeout=self.timeout)
        except (TimeoutError, SlurmUnreachable, OSError) as exc:
            log.warning("%s: asking Slurm about nodes %s: %s", self.runner.where, ", ".join(sorted(self.names)), exc)
            return
        if done.status != 0:
            log.warning("%s: `sinfo` failed (exit %d): %s", self.runner.where, done.status, done.stderr.strip()[-500:])
            return
        states = {}
        for line in done.stdout.splitlines():
            node, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            if node:
                states[node.strip()] = (state.strip(), reason.strip())
        self._states = states
        self._polled = time.monotonic()
