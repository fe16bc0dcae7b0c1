"""After a genuine host-key change: how `skyhive down --force NAME` can still clean up a named SSH pool.

A named pool pins the key each host showed when it was created (`ClusterRecord.host_keys`); every later
login refuses another key (`HostKeyChanged`), and so did `down` — which left the pool's workers on a
host that was, say, reinstalled behind the same address, with no way out but editing the record. Here,
with `--force` only, and never silently:

- each host whose key no longer matches is named with both fingerprints (the recorded key's and the
  one it shows now), as a warning;
- the user decides per host by fingerprint — on a terminal by typing it, or with
  `--accept-host-key FINGERPRINT` — the new one: trust the key the host shows now and stop the pool
  there with it pinned; the recorded one: the machine that had that key is gone, so forget the host
  (nothing is stopped there, and the warning says so);
- a host left undecided keeps the record: `down` fails naming both fingerprints and both choices.

The key a host shows is read with an SSH key exchange only (no login, nothing sent but the handshake).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ...errors import SSHError
from .record import ClusterRecord

__all__ = ["ChangedKey", "fingerprint", "changed_host_keys", "decide", "Decision", "not_reached"]

log = logging.getLogger("skyhive.clusters")


def fingerprint(key: str) -> str:
    """The SHA256 fingerprint of an OpenSSH public key ("ssh-ed25519 AAAA..."), as `ssh-keygen -l` shows it."""
    from ...providers.sshlib import asyncssh
    return str(asyncssh.import_public_key(key).get_fingerprint("sha256"))


@dataclass(frozen=True, slots=True)
class ChangedKey:
    """Node `node`'s host `host` showed `recorded` when the pool was created and shows `now`."""

    node: int
    host: str
    recorded: str
    now: str

    @property
    def recorded_fingerprint(self) -> str:
        return fingerprint(self.recorded)

    @property
    def now_fingerprint(self) -> str:
        return fingerprint(self.now)

    def describe(self) -> str:
        return (f"host {self.host} (node {self.node}) shows another host key than when the pool was created: "
                f"recorded {self.recorded_fingerprint}, now {self.now_fingerprint}")


def changed_host_keys(rec: ClusterRecord) -> list[ChangedKey]:
    """The hosts of the SSH pool `rec` whose key is not the recorded one (hosts that do not answer are
    left out: their key is unknown, and `down` names them as unreachable)."""
    from ..common import bridge
    from ..kinds.ssh.keep import provider_of  # (host keys are what the SSH kind pins: its own module)

    provider = provider_of(rec)
    nodes = sorted({int(k) for k in rec.host_keys if int(k) < rec.nodes})

    async def look() -> list[ChangedKey]:
        from ...providers.sshlib import asyncssh
        async def one(node: int) -> ChangedKey | None:
            _, addr, port = provider.hosts[node]
            try:
                key = await asyncio.wait_for(asyncssh.get_server_host_key(addr, port, config=None),
                                             provider.connect_timeout)
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
                log.info("pool %s: host %s: could not read its host key: %s", rec.name, addr, exc)
                return None
            if key is None:
                return None
            now = key.export_public_key().decode().split()
            recorded = rec.host_keys[str(node)].split()
            if now[:2] == recorded[:2]:
                return None
            return ChangedKey(node=node, host=provider.show_host(provider.hosts[node]), recorded=" ".join(recorded[:2]),
                              now=" ".join(now[:2]))

        found = await asyncio.gather(*(one(n) for n in nodes))
        return [c for c in found if c is not None]

    return bridge.run(look, thread=True)


@dataclass(frozen=True, slots=True)
class Decision:
    """What `down --force` does per changed host: `pin` (node -> the new key to stop the pool with),
    `forget` (nodes whose recorded machine is gone: nothing stopped there)."""

    pin: dict[int, str]
    forget: frozenset[int]


def decide(changed: list[ChangedKey], *, accept: Collection[str], ask: Callable[[str], str] | None,
           warn: Callable[[str], None], pool: str) -> Decision:
    """Warn about each changed host, then take the user's choice for it: a fingerprint in `accept`
    (`--accept-host-key`), else — when `ask` is given (a terminal) — the fingerprint typed in answer.
    Raises `SSHError` naming every host left undecided, both fingerprints and how to choose."""
    pin: dict[int, str] = {}
    forget: set[int] = set()
    undecided: list[ChangedKey] = []
    for c in changed:
        old, new = c.recorded_fingerprint, c.now_fingerprint
        warn(f"warning: pool {pool}: {c.describe()}. This is expected only if the host was reinstalled or "
             f"replaced; otherwise someone may be intercepting the connection.")
        choice = new if new in accept else old if old in accept else ""
        if not choice and ask is not None:
            choice = ask(f"Type {new} to trust the new key and stop the pool on {c.host} with it, or {old} if the "
                         f"machine with the recorded key is gone (nothing is stopped there); Enter keeps the "
                         f"record: ").strip()
        if choice == new:
            warn(f"warning: pool {pool}: host {c.host}: trusting its new key {new} to stop the pool there")
            pin[c.node] = c.now
        elif choice == old:
            warn(f"warning: pool {pool}: host {c.host}: forgotten as the machine with key {old} is gone; "
                 f"NOTHING was stopped on {c.host}")
            forget.add(c.node)
        else:
            undecided.append(c)
    if undecided:
        raise SSHError(
            f"pool {pool!r}: not taken down: " + "; ".join(c.describe() for c in undecided)
            + f". If that is expected, choose per host: `skyhive down --force --accept-host-key NEW {pool}` "
            f"trusts the new key and stops the pool there, `--accept-host-key RECORDED` forgets the host "
            f"(its machine is gone; nothing is stopped there)", host=undecided[0].host)
    return Decision(pin=pin, forget=frozenset(forget))


def not_reached(rec: ClusterRecord, errors: list[str], *, command: str) -> SSHError:
    """Why `command` (say `exec train`) cannot use the SSH pool `rec` whose hosts could not be asked
    (`errors`, from `KeepSupport.live`): a host that shows another key than the recorded one is named with
    both fingerprints and what to do — its workers may well run there still; otherwise the hosts that
    did not answer. Never "its workers are gone": that is not known."""
    changed = changed_host_keys(rec) if rec.host_keys else []
    if changed:
        return SSHError(
            f"{command}: pool {rec.name!r} cannot be reached: " + "; ".join(c.describe() for c in changed)
            + f". Its workers may still run there. If the host was reinstalled or replaced, `skyhive down --force "
            f"{rec.name}` takes the pool down choosing by fingerprint (then `skyhive launch -c {rec.name}` makes it "
            f"anew, pinning the new key); if not, someone may be intercepting the connection: do not trust it",
            host=changed[0].host)
    return SSHError(f"{command}: pool {rec.name!r}: could not ask its hosts whether its workers run: "
                    + "; ".join(errors) + " (try again once they answer; `skyhive status` shows the pool)")
