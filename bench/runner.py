"""One system, one mode, in its own process: ``python -m bench.runner warm|cold SYSTEM --json PATH``.

The orchestrator (bench.cli) starts this in a new session, with a timeout, and kills whatever is
left in that session afterwards. Results go to the JSON file (rewritten after every workload, so a
timeout keeps what was measured); lines starting with "@@ " on stderr are progress for the console,
everything else on stdout/stderr is the system's own chatter and goes to the log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any, Callable

EXIT_UNAVAILABLE = 3


def _progress(msg: str) -> None:
    print("@@ " + msg, file=sys.stderr, flush=True)


def _summary(res: dict) -> str:
    if "error" in res:
        return "ERROR " + res["error"]
    if "p90_s" in res:
        return f"median {res['median_s'] * 1e6:,.0f} us, p90 {res['p90_s'] * 1e6:,.0f} us"
    if "tasks_per_s" in res:
        return f"{res['tasks_per_s']:,.0f} tasks/s"
    if "gb_per_s" in res:
        return f"{res['gb_per_s']:.2f} GB/s"
    if "ratio" in res:
        return f"median {res['median_s'] * 1e3:.2f} ms, {res['ratio']:.2f}x the plain map (first {res['first_s']:.2f} s)"
    if "first_s" in res:
        return f"median {res['median_s'] * 1e3:.2f} ms (first {res['first_s'] * 1e3:.0f} ms)"
    if res.get("skipped"):
        return "not run"
    return "done"


def _import_system(system: str) -> tuple[dict, float]:
    """Import what the system needs, timed. Raises ImportError with a reason if it is missing."""
    t0 = time.perf_counter()
    if system == "floor":
        import cloudpickle
        import msgpack

        versions = {"cloudpickle": cloudpickle.__version__,
                    "msgpack": ".".join(map(str, msgpack.version))}
    elif system == "skyhive":
        from bench.skyhive_bench import load

        sky = load()
        versions = {"skyhive": getattr(sky, "__version__", "?")}
    elif system == "ray":
        import ray

        versions = {"ray": ray.__version__}
    elif system == "dask":
        import dask
        import distributed

        versions = {"dask": dask.__version__, "distributed": distributed.__version__}
    else:
        raise SystemExit(f"unknown system {system!r}")
    return versions, time.perf_counter() - t0


def _entry(system: str, mode: str) -> Callable:
    if system == "floor":
        from bench import floor

        return floor.warm if mode == "warm" else floor.cold
    if system == "skyhive":
        from bench import skyhive_bench

        return skyhive_bench.warm if mode == "warm" else skyhive_bench.cold
    from bench import peers

    return getattr(peers, f"{system}_{mode}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.runner")
    ap.add_argument("mode", choices=["warm", "cold"])
    ap.add_argument("system", choices=["floor", "skyhive", "ray", "dask"])
    ap.add_argument("--json", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)

    from bench.common import Params

    out: dict[str, Any] = {"system": a.system, "mode": a.mode, "status": "running", "pid": os.getpid()}

    def save() -> None:
        tmp = a.json + ".part"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, a.json)

    try:
        out["versions"], out["import_s"] = _import_system(a.system)
    except Exception as exc:  # missing, or a half-written library that fails to import
        reason = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        out.update(status="unavailable", reason=reason[:400] or type(exc).__name__)
        save()
        return EXIT_UNAVAILABLE
    save()
    entry = _entry(a.system, a.mode)
    try:
        if a.mode == "cold":
            out["cold"] = asyncio.run(entry())
        else:
            params = Params.quick() if a.quick else Params()
            out["workloads"] = {}

            def record(name: str, res: dict) -> None:
                out["workloads"][name] = res
                save()
                _progress(f"{name}: {_summary(res)} ({res.get('wall_s', 0):.1f} s)")

            asyncio.run(entry(params, record, lambda s: None))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        out.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:400])
        save()
        return 1
    out["status"] = "ok"
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
