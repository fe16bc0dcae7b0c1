"""`resources.ports` (SkyPilot's spelling: `8888`, `"8000-8010"`, or a list of those) and a named pool's
endpoints: how each of its ports is reached from this machine (`skyhive status --endpoints NAME`).

Every provider's ports are reached through the node's access (`skyhive forward`: the pool's SSH
connection, another kind's exec), no port open to anyone; a pool's on this machine are this machine's.
On a cloud that opens them (`Feature.OPEN_PORTS`), they are also open on the pool's firewall for this
client's address only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["parse_ports", "spell", "endpoints"]

_MAX_RANGE = 1024  # ports in one range: more is almost surely a typo (SkyPilot takes any; a firewall rule does too)


def _one(raw: Any) -> tuple[int, int]:
    if isinstance(raw, bool):
        raise ValueError(f"expected a port (8888) or a range (\"8000-8010\"), got {raw!r}")
    text = str(raw).strip()
    first, dash, last = text.partition("-")
    try:
        lo, hi = int(first), int(last) if dash else int(first)
    except ValueError:
        raise ValueError(f"expected a port (8888) or a range (\"8000-8010\"), got {raw!r}") from None
    for port in (lo, hi):
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is out of range (1-65535) in {raw!r}")
    if hi < lo:
        raise ValueError(f"range {raw!r} ends before it starts")
    if hi - lo + 1 > _MAX_RANGE:
        raise ValueError(f"range {raw!r} spans {hi - lo + 1} ports (at most {_MAX_RANGE})")
    return lo, hi


def parse_ports(raw: Any) -> tuple[tuple[int, int], ...]:
    """`8888`, `"8000-8010"` or a list of those -> sorted, merged (first, last) ranges; `ValueError`
    naming the entry otherwise."""
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    ranges = sorted(_one(item) for item in items)
    merged: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def spell(ranges: Any) -> list[str]:
    """The ranges as SkyPilot writes them: "8888", "8000-8010"."""
    return [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges]


def endpoints(name: str) -> list[dict[str, Any]]:
    """The named pool's ports and how each is reached from here: {"port", "node", "how"} per port
    (a range: its first port)."""
    from .kept_pool import KeptPool

    kept = KeptPool.load(name)
    out = []
    for lo, hi in kept.rec.spec.get("ports") or ():
        for port in range(int(lo), int(hi) + 1):
            if kept.here:
                how = f"http://127.0.0.1:{port}  (this machine)"
            else:
                how = f"skyhive forward {name} {port}  (then http://127.0.0.1:{port})"
            out.append({"port": port, "node": 0, "how": how})
    return out
