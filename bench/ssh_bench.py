"""skyhive over SSH against the raw asyncssh floor, on real OpenSSH hosts made here (needs root).

    python -m bench.ssh_bench [--quick]

Rows (medians; compare only within one run — the machine is shared and noisy):

- ``rtt floor``: raw asyncssh → the same sshd → a bare Python worker (`bench/_floor_worker.py`:
  length-prefixed msgpack frames carrying a cloudpickled function), one call at a time;
- ``rtt skyhive``: `await pool.run(nop)` on a warm 1-node `sky.SSH` pool on that sshd (detached
  worker behind the relay, resumable link, stream-local forwarding); target ≤ 1.5× the floor;
- ``broadcast 3 hosts``: `await pool.broadcast(nop)` over 3 network-namespace hosts;
- ``cold start``: a 1-node pool on a host that has never seen skyhive (runtime shipped, environment
  built; a trivial `setup` command) until its first result;
- ``warm start 2 hosts``: a 2-node pool on namespace hosts that already hold the environment, from
  entering the pool to its first broadcast result; target ≤ 1.0 s.

Returns (and prints) a dict of the figures. The sshd/namespace helpers are the test suite's
(`tests/infra`), so the bench runs from the repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent


def nop() -> int:
    return 1


async def _floor_rtt(server: Any, python: str, pythonpath: str, n: int, warmup: int) -> list[float]:
    import asyncssh
    import cloudpickle
    import msgpack

    from skyhive.runtime.transport.ssh import FAST_CIPHERS

    opts = server.connect_options(encryption_algs=list(FAST_CIPHERS))
    async with asyncssh.connect(**opts) as conn:
        remote = f"{server.home}/floor_worker.py"
        async with conn.start_sftp_client() as sftp:
            await sftp.put(str(REPO / "bench" / "_floor_worker.py"), remote)
        proc = await conn.create_process(f"env PYTHONPATH={pythonpath} {python} {remote}", encoding=None)
        fn = cloudpickle.dumps(nop)
        args = cloudpickle.dumps(((), {}))
        times = []
        for i in range(warmup + n):
            body = msgpack.packb([i, fn, args, 0, False])
            t0 = time.perf_counter()
            proc.stdin.write(len(body).to_bytes(4, "big") + body)
            head = await proc.stdout.readexactly(4)
            reply = msgpack.unpackb(await proc.stdout.readexactly(int.from_bytes(head, "big")))
            t1 = time.perf_counter()
            assert reply[0] == i and reply[1]
            if i >= warmup:
                times.append(t1 - t0)
        proc.stdin.write_eof()
        proc.close()
        return times


def _provider(hosts: list[Any], **kw: Any) -> Any:
    import skyhive as sky

    known = hosts[0].dir.parent / "bench_known_hosts"
    known.write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    return sky.SSH(hosts=[f"{h.user}@{h.host}:{h.port}" for h in hosts], key=str(hosts[0].client_key),
                   known_hosts=str(known), **kw)


async def _timed_calls(call: Any, n: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        await call()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


async def run_bench(quick: bool = False) -> dict[str, Any]:
    import skyhive as sky
    from tests.infra.netns import NetnsHosts, check_netns_support
    from tests.infra.sshd import SshTestEnv, Sshd

    n, warmup = (300, 50) if quick else (2000, 200)
    bn = 100 if quick else 500
    out: dict[str, Any] = {}
    env = SshTestEnv.create()
    try:
        with Sshd(env) as server:
            # skyhive warm round trip, then the floor on the same sshd with the same Python and libraries
            async with sky.Pool(provider=_provider([server]), nodes=1, output=None) as pool:
                node_env = pool._runtime.nodes[0].transport.node_env
                sky_times = await _timed_calls(lambda: pool.run(nop), n, warmup)
            floor_times = await _floor_rtt(server, node_env.python, node_env.pythonpath[0], n, warmup)
            out["rtt_floor_us"] = statistics.median(floor_times) * 1e6
            out["rtt_skyhive_us"] = statistics.median(sky_times) * 1e6
            out["rtt_ratio"] = out["rtt_skyhive_us"] / out["rtt_floor_us"]
            # cold start: a home that has never seen skyhive
            cold_home = env.dir / "cold-home"
            from tests.infra.sshd import make_home

            make_home(cold_home, env.user)
            with Sshd(env, home=cold_home) as fresh:
                t0 = time.perf_counter()
                async with sky.Pool(provider=_provider([fresh]), nodes=1, output=None,
                                    image=sky.Image(setup=["echo ready"])) as pool:
                    await pool.run(nop)
                    out["cold_start_s"] = time.perf_counter() - t0
        try:
            check_netns_support()
        except Exception as exc:  # noqa: BLE001 - reported as a skipped row
            out["netns"] = f"skipped: {exc}"
            return out
        with NetnsHosts(env, 3) as hosts:
            async with sky.Pool(provider=_provider(list(hosts)), nodes=3, output=None) as pool:
                times = await _timed_calls(lambda: pool.broadcast(nop), bn, 20)
            out["broadcast3_us"] = statistics.median(times) * 1e6
            starts = []
            for _ in range(3 if quick else 5):  # the first pool above warmed these hosts
                t0 = time.perf_counter()
                async with sky.Pool(provider=_provider(list(hosts)[:2]), nodes=2, output=None) as pool:
                    await pool.broadcast(nop)
                    starts.append(time.perf_counter() - t0)
            out["warm_start2_s"] = statistics.median(starts)
    finally:
        env.close()
    return out


def table(r: dict[str, Any]) -> str:
    rows = [
        ("rtt floor (asyncssh → sshd → bare worker)", f"{r.get('rtt_floor_us', float('nan')):.0f} µs", ""),
        ("rtt skyhive over SSH (warm)", f"{r.get('rtt_skyhive_us', float('nan')):.0f} µs",
         f"{r.get('rtt_ratio', float('nan')):.2f}× floor (target ≤ 1.5×)"),
        ("broadcast to 3 namespace hosts", f"{r.get('broadcast3_us', float('nan')):.0f} µs", ""),
        ("cold start, 1 host (ship runtime, build env)", f"{r.get('cold_start_s', float('nan')):.2f} s", ""),
        ("warm start, 2 hosts (to first result)", f"{r.get('warm_start2_s', float('nan')):.2f} s", "target ≤ 1.0 s"),
    ]
    width = max(len(a) for a, _, _ in rows)
    lines = [f"| {'what'.ljust(width)} | figure | note |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {a.ljust(width)} | {b} | {c} |" for a, b, c in rows]
    if "netns" in r:
        lines.append(f"namespace rows {r['netns']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.ssh_bench")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args(argv)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    result = anyio.run(run_bench, args.quick, backend="asyncio")
    print(table(result))
    return result


if __name__ == "__main__":
    main()
