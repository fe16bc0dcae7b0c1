"""``python -m bench``: every system, every workload, one run, one table of ratios.

Each system runs in its own process (``python -m bench.runner``), started in a new session with a
timeout; whatever it leaves behind in that session (Ray's raylet and workers, Dask's nanny and
workers, floor workers) is killed afterwards by pid. Each cold start is a fresh such process.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.common import Params

SYSTEMS = ("floor", "skyhive", "ray", "dask")
PEER_MODULES = {"ray": ("ray",), "dask": ("dask", "distributed")}
NOT_INSTALLED = "not installed — pip install -e .[bench]"
BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


# ------------------------------------------------------------------------- process handling


def _session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes in session `sid`, from /proc (Linux)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            pids.append(int(entry))
    return pids


def _kill_session(sid: int, grace: float = 5.0) -> int:
    """SIGKILL every process left in the session we started; return how many there were."""
    if not os.path.isdir("/proc"):
        try:
            os.killpg(sid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return 0
    left = _session_pids(sid)
    n = len(left)
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        left = _session_pids(sid)
    return n


class Runner:
    """Starts `python -m bench.runner ...` and keeps its chatter in a log file."""

    def __init__(self, logdir: Path, verbose: bool) -> None:
        self.logdir = logdir
        self.verbose = verbose
        self.count = 0

    def __call__(self, mode: str, system: str, quick: bool, timeout: float) -> dict:
        self.count += 1
        tag = f"{self.count:02d}-{system}-{mode}"
        out_json = self.logdir / f"{tag}.json"
        log_path = self.logdir / f"{tag}.log"
        cmd = [sys.executable, "-m", "bench.runner", mode, system, "--json", str(out_json)]
        if quick:
            cmd.append("--quick")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        t0 = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.PIPE, text=True, errors="replace",
                                    start_new_session=True)
            pump = threading.Thread(target=self._pump, args=(proc.stderr, log, system),
                                    daemon=True)
            pump.start()
            timed_out = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            except KeyboardInterrupt:
                _kill_session(proc.pid)
                proc.wait()
                raise
            finally:
                leftovers = _kill_session(proc.pid)
                proc.wait()
                pump.join(timeout=5)
        res: dict[str, Any] = {}
        if out_json.exists():
            try:
                res = json.loads(out_json.read_text())
            except ValueError:
                res = {}
        res["wall_s"] = time.perf_counter() - t0
        res["log"] = str(log_path)
        if timed_out:
            res["status"] = "error" if res.get("status") != "unavailable" else res["status"]
            res["reason"] = f"timed out after {timeout:.0f} s (partial results kept; log {log_path})"
        elif res.get("status") in (None, "running"):
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            res["status"] = "error"
            res["reason"] = (f"runner exited with code {proc.returncode}: "
                             + " | ".join(tail))[:400]
        if leftovers and mode == "warm" and self.verbose:
            print(f"  [{system}] cleaned up {leftovers} leftover process(es)", flush=True)
        return res

    def _pump(self, stream: Any, log: Any, system: str) -> None:
        for line in stream:
            if line.startswith("@@ "):
                print(f"  [{system}] {line[3:].rstrip()}", flush=True)
            else:
                log.write(line)
                if self.verbose:
                    sys.stderr.write(f"  [{system}] {line}")


# ------------------------------------------------------------------------------ facts


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def machine_facts() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": f"{os.cpu_count()} cores ({usable} usable)",
        "cpu": cpu,
        "mem": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"Python {platform.python_version()} ({platform.python_implementation()})",
        "load_start": _load(),
        "versions": {d: _version(d) for d in ("skyhive", "ray", "dask", "distributed",
                                              "cloudpickle", "msgpack", "numpy")},
    }


# ------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="skyhive against the raw pipe floor and against Ray and Dask, in one run.")
    ap.add_argument("--only", default=",".join(SYSTEMS),
                    help=f"comma-separated systems to run (default: all of {','.join(SYSTEMS)})")
    ap.add_argument("--quick", action="store_true",
                    help="fewer iterations: a smoke test (floor alone finishes in seconds)")
    ap.add_argument("--out", default=str(BENCH_DIR / "results.md"),
                    help="Markdown report, overwritten (default: bench/results.md)")
    ap.add_argument("--cold-runs", type=int, default=None,
                    help="fresh starts per system for `cold` (default 5, quick 2)")
    ap.add_argument("--script-runs", type=int, default=None,
                    help="whole lives of the short script per system, in turns (default 7, quick 2)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds allowed per system's warm run (default 900, quick 120)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="also show the systems' own log output")
    a = ap.parse_args(argv)
    only = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in only if s not in SYSTEMS]
    if bad or not only:
        ap.error(f"--only: unknown system(s) {', '.join(bad) or '(none)'}; choose from "
                 + ", ".join(SYSTEMS))
    a.systems = [s for s in SYSTEMS if s in only]
    return a


def _script_rounds(results: dict[str, dict], ready: list[str], runs: int) -> None:
    """The short script's whole life (`bench.script_life`), skyhive's and the floor's in turns, each a
    fresh process: both systems' results get `scripts` (seconds), or `script_error`."""
    systems = tuple(s for s in ("floor", "skyhive") if s in ready)
    if len(systems) < 2 or runs < 1:
        return
    from bench import script_life

    print(f"the short script's whole life, {runs} rounds: floor and skyhive in turns …", flush=True)
    load = _load()
    try:
        times = script_life.measure(runs, systems)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        for system in systems:
            results[system]["script_error"] = f"{type(exc).__name__}: {exc}"[:400]
        print(f"script: failed: {exc}", flush=True)
        return
    for system in systems:
        results[system]["scripts"] = times[system]
        results[system]["script_load"] = load


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    params = Params.quick() if a.quick else Params()
    cold_runs = a.cold_runs if a.cold_runs is not None else params.cold_runs
    if a.script_runs is not None:
        params = dataclasses.replace(params, script_runs=a.script_runs)
    script_runs = params.script_runs
    warm_timeout = a.timeout or (120.0 if a.quick else 900.0)
    cold_timeout = 60.0 if a.quick else 180.0
    command = " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)])
    facts = machine_facts()
    print(report.header_line(facts), flush=True)

    logdir = Path(tempfile.mkdtemp(prefix="skyhive-bench-"))
    run = Runner(logdir, a.verbose)
    results: dict[str, dict] = {}
    t_all = time.perf_counter()
    try:
        ready = []
        for system in a.systems:
            missing = [m for m in PEER_MODULES.get(system, ()) if importlib.util.find_spec(m) is None]
            if missing:
                results[system] = {"status": "unavailable", "reason": NOT_INSTALLED}
                print(f"{system}: {NOT_INSTALLED}", flush=True)
                continue
            print(f"{system}: warm workloads …", flush=True)
            load = _load()
            res = run("warm", system, a.quick, warm_timeout)
            res["load_before"] = load
            results[system] = res
            if res.get("status") == "unavailable":
                print(f"{system}: not available ({res.get('reason')})", flush=True)
                continue
            if res.get("status") != "ok":
                print(f"{system}: {res.get('reason')}", flush=True)
            res["colds"], res["cold_errors"] = [], []
            ready.append(system)
        # Cold starts in rounds (floor, skyhive, ray, dask, floor, …), so that a change in the
        # machine's load during the run falls on every system alike.
        for i in range(cold_runs if ready else 0):
            print(f"cold starts, round {i + 1}/{cold_runs}: {', '.join(ready)} …", flush=True)
            for system in ready:
                c = run("cold", system, a.quick, cold_timeout)
                res = results[system]
                if c.get("status") == "ok":
                    res["colds"].append({**c["cold"], "import_s": c.get("import_s")})
                else:
                    res["cold_errors"].append(c.get("reason", "failed"))
                    print(f"{system}: cold start failed: {c.get('reason')}", flush=True)
        _script_rounds(results, ready, script_runs)
    except KeyboardInterrupt:
        print("interrupted; reporting what was measured", flush=True)
    elapsed = time.perf_counter() - t_all
    facts["load_end"] = _load()

    md = report.render(results, a.systems, facts, params, cold_runs, command, elapsed)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md.full)
    print()
    print(md.console)
    print(f"\nwritten to {out}   ({elapsed:.0f} s in all)")
    failed = any(r.get("status") == "error" or r.get("cold_errors") or r.get("script_error")
                 or any("error" in w for w in r.get("workloads", {}).values())
                 for r in results.values())
    if failed:
        print(f"logs kept in {logdir}")
    else:
        shutil.rmtree(logdir, ignore_errors=True)
    return 0
