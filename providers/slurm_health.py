"""What the Slurm controller says about the nodes of a pool's allocation while its workers run
(`Slurm.node_problem`, see `Provider.node_problem`).

A Slurm node can be lost while its worker still answers: when the node's `slurmd` dies, the job step
(`slurmstepd` and the worker under it) goes on, but the controller soon flags the node as not
responding (`sinfo` shows its state with a `*`), then marks it DOWN and ends the whole job
(`SlurmdTimeout` later) — the worker's srun then just exits 0, which says nothing. Asking the
controller every heartbeat names the node and the cause as soon as Slurm knows it — but Slurm knows it
late: the controller flags a silent node only after its own pings fail (about 20 s with
SlurmdTimeout=30, minutes with Slurm's default of 300 s).

Direct evidence comes first where this machine can reach the nodes (Mode 1, `probe=True`): a poll
makes one TCP connect (at most `PROBE_TIMEOUT` s) to the node's slurmd, at its NodeAddr (the handle's
`private_addr`, learned once per allocation) and SlurmdPort (`scontrol show config`, asked once). A
slurmd that died while its host is up leaves the port closed, and the connect is REFUSED at once;
`REFUSALS` refusals in a row (a slurmd being restarted refuses for a moment, and its steps survive
that) name the node as lost. Only a refusal counts: a timeout or an unreachable network says nothing
about slurmd. The connect sends nothing, which slurmd logs as two error lines, so a node whose slurmd
accepts is probed at most every `PROBE_INTERVAL` s (after a refusal, at the next poll).

One `sinfo` answers for every node the provider's pools use, at most once per `max_age` seconds
however many nodes ask.
"""

from __future__ import annotations

import logging
import time

import anyio

from .slurm_cmd import CommandRunner, SlurmUnreachable

__all__ = ["NodeHealth", "PROBE_INTERVAL", "PROBE_TIMEOUT", "REFUSALS", "problem_of", "refused_problem", "slurmd_port"]

log = logging.getLogger("skyhive.providers.slurm")

#: Node states (sinfo's %T, lower case, without the flag suffixes) in which a running job there is lost.
_LOST = ("down", "fail")

#: How long one connect to a node's slurmd may take (a timeout is no evidence either way).
PROBE_TIMEOUT = 1.0
#: Refused connects in a row, one per poll, before the node is declared lost.
REFUSALS = 2
#: Seconds between two probes of a node whose slurmd last accepted. Each accepted probe costs the
#: node's slurmd log two error lines ("service_connection: slurm_receive_msg: Zero Bytes were
#: transmitted or received", measured on the test cluster's slurmd 23.x): probing at every heartbeat
#: (2 s) wrote ~86,000 a day per node. After a refusal the next poll probes again at once, so a dead
#: slurmd is still named within about this interval plus `REFUSALS` polls.
PROBE_INTERVAL = 10.0
#: Slurm's SlurmdPort when `scontrol show config` does not name one.
DEFAULT_SLURMD_PORT = 6818


def slurmd_port(config: str) -> int:
    """SlurmdPort from the text of `scontrol show config` (Slurm's default 6818 when absent)."""
    for line in config.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "SlurmdPort" and value.strip().isdigit():
            return int(value.strip())
    return DEFAULT_SLURMD_PORT


def refused_problem(name: str, addr: str, port: int) -> str:
    """The sentence for node `name` whose slurmd refused a connection at `addr`:`port`."""
    return f"Slurm node {name}: its slurmd does not accept connections (refused at {addr}:{port}); the node is lost"


def _is_refused(exc: BaseException) -> bool:
    """Whether a failed connect was refused (anyio wraps each attempt's error in `__cause__`)."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        return all(_is_refused(e) for e in cause.exceptions)
    return isinstance(cause, ConnectionRefusedError)


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

    def __init__(self, runner: CommandRunner, *, timeout: float, max_age: float = 1.0, probe: bool = False,
                 probe_interval: float = PROBE_INTERVAL) -> None:
        self.runner = runner
        self.timeout = timeout
        self.max_age = max_age
        self.probe = probe
        self.probe_interval = probe_interval
        self._probed: dict[str, float] = {}  # node -> when its slurmd was last probed
        self.names: set[str] = set()
        self._states: dict[str, tuple[str, str]] = {}
        self._polled = -1e9
        self._lock = anyio.Lock()
        self._port: int | None = None
        self._port_lock = anyio.Lock()
        self._refusals: dict[str, int] = {}
        #: nodes this has named as lost (Slurm keeps a cancelled job COMPLETING there until its
        #: controller marks them DOWN; see `Slurm.terminate`)
        self.lost: set[str] = set()

    async def problem(self, name: str, addr: str = "") -> str | None:
        """Why node `name` (NodeAddr `addr`) is lost: its slurmd refusing connections (with `probe`),
        else per the controller; or None (also when neither can be asked right now: that is no
        evidence against the node)."""
        self.names.add(name)
        now = time.monotonic()
        due = self._refusals.get(name, 0) > 0 or now - self._probed.get(name, -1e9) >= self.probe_interval
        if self.probe and addr and due:
            self._probed[name] = now
            why = await self._probe(name, addr)
            if why is not None:
                self.lost.add(name)
                return why
        async with self._lock:
            if time.monotonic() - self._polled >= self.max_age or name not in self._states:
                await self._poll()
        state, reason = self._states.get(name, ("", ""))
        why = problem_of(name, state, reason) if state else None
        if why is not None:
            self.lost.add(name)
        return why

    async def _probe(self, name: str, addr: str) -> str | None:
        """One connect to the slurmd of node `name`: the sentence once it was refused `REFUSALS` times
        in a row, else None."""
        port = await self._slurmd_port()
        if port is None:
            return None
        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                stream = await anyio.connect_tcp(addr, port)
        except (TimeoutError, OSError) as exc:
            if not _is_refused(exc):
                log.debug("Slurm node %s: connecting to its slurmd at %s:%d: %r (no evidence)", name, addr, port, exc)
                return None
            count = self._refusals[name] = self._refusals.get(name, 0) + 1
            log.info("Slurm node %s: its slurmd refused a connection at %s:%d (%d in a row)", name, addr, port, count)
            return refused_problem(name, addr, port) if count >= REFUSALS else None
        await stream.aclose()
        self._refusals.pop(name, None)
        return None

    async def _slurmd_port(self) -> int | None:
        """SlurmdPort, asked once (`scontrol show config`); None while the controller cannot say."""
        async with self._port_lock:
            if self._port is None:
                try:
                    with anyio.fail_after(self.timeout):
                        done = await self.runner.run(("scontrol", "show", "config"), timeout=self.timeout)
                except (TimeoutError, SlurmUnreachable, OSError) as exc:
                    log.warning("%s: asking Slurm for SlurmdPort: %s", self.runner.where, exc)
                    return None
                if done.status != 0:
                    log.warning("%s: `scontrol show config` failed (exit %d): %s", self.runner.where, done.status,
                                done.stderr.strip()[-500:])
                    return None
                self._port = slurmd_port(done.stdout)
            return self._port

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
