"""A short script's whole life — import, pool up, first call, close — against the floor's, in fresh
processes taken in turns (issue 41).

``python -m bench.script_life [--runs 7] [--phases]``: prints one JSON line. The two scripts:

- **skyhive** (`SKYHIVE`): the script a user writes first::

      import skyhive as sky
      def nop(): return 1
      with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
          pool.run(nop)

- **floor** (`FLOOR`): two bare Python workers that import cloudpickle and msgpack, answer a line and
  exit when their stdin closes; the script waits for both to exit.

Each figure is a fresh interpreter's wall time from spawn to exit (`python -c SCRIPT`), so Python's
own start-up is in both. Bytecode caches are on, as users have them: `PYTHONDONTWRITEBYTECODE` is
removed from the children's environment and each script runs once, unmeasured, before the rounds
(which also writes the caches). Rounds alternate the order (floor first, then skyhive first), so a
change of the machine's load falls on both; median of `runs` each.

With `--phases`, the skyhive script is also run with marks (`PHASES`), median of `runs`: `import`
(`import skyhive` and the lazy `sky.Pool`, `sky.Local`), `enter` (`Pool.__enter__`: the event loop
thread, the pool actor, the workers started and their handshakes), `first` (the first `run`), `exit`
(`Pool.__exit__`: the workers ended and what the close flushes). Where the time goes is written down in
docs/startup.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SKYHIVE = """\
import skyhive as sky
def nop(): return 1
with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
    pool.run(nop)
"""

FLOOR_WORKER = """\
import sys, cloudpickle, msgpack
for line in sys.stdin:
    sys.stdout.write(line)
    sys.stdout.flush()
"""

FLOOR = f"""\
import subprocess, sys
workers = [subprocess.Popen([sys.executable, "-c", {FLOOR_WORKER!r}], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE) for _ in range(2)]
for w in workers:
    w.stdin.write(b"1\\n")
    w.stdin.flush()
for w in workers:
    assert w.stdout.readline() == b"1\\n"
for w in workers:
    w.stdin.close()
for w in workers:
    w.wait()
"""

PHASES = """\
import time
t0 = time.perf_counter()
import skyhive as sky
sky.Pool, sky.Local
t1 = time.perf_counter()
def nop(): return 1
p = sky.Pool(provider=sky.Local(), nodes=2, output=None)
pool = p.__enter__()
t2 = time.perf_counter()
pool.run(nop)
t3 = time.perf_counter()
p.__exit__(None, None, None)
t4 = time.perf_counter()
import json
print(json.dumps({"import": t1 - t0, "enter": t2 - t1, "first": t3 - t2, "exit": t4 - t3}))
"""

SCRIPTS = {"floor": FLOOR, "skyhive": SKYHIVE}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users have bytecode caches
    return env


def run_once(script: str, timeout: float = 120.0) -> tuple[float, str]:
    """Seconds from spawn to exit of `python -c script`, and its stdout; raises if it fails."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], env=_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"the script failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return took, done.stdout


def measure(runs: int = 7, systems: tuple[str, ...] = ("floor", "skyhive")) -> dict[str, list[float]]:
    """`runs` whole lives of each system's script, in turns (the order reversed every other round)."""
    for system in systems:  # unmeasured: bytecode caches written, files in the page cache
        run_once(SCRIPTS[system])
    times: dict[str, list[float]] = {s: [] for s in systems}
    for i in range(runs):
        for system in (systems if i % 2 == 0 else tuple(reversed(systems))):
            times[system].append(run_once(SCRIPTS[system])[0])
    return times


def phases(runs: int = 7) -> dict[str, float]:
    """Medians of the skyhive script's phases (seconds), each run a fresh process."""
    run_once(PHASES)
    seen: dict[str, list[float]] = {}
    for _ in range(runs):
        for name, value in json.loads(run_once(PHASES)[1]).items():
            seen.setdefault(name, []).append(value)
    return {name: statistics.median(values) for name, values in seen.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.script_life")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--phases", action="store_true", help="also the skyhive script's phases")
    a = ap.parse_args(argv)
    load = os.getloadavg()[0]
    times = measure(a.runs)
    out: dict[str, object] = {"load_before": load, "runs": times,
                              "median_s": {s: statistics.median(v) for s, v in times.items()}}
    out["ratio"] = out["median_s"]["skyhive"] / out["median_s"]["floor"]  # type: ignore[index]
    if a.phases:
        out["phases_s"] = phases(a.runs)
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
