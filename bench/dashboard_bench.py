"""The dashboard over a 10,000-node pool: page loads and the timeline, while the pool's log grows.

    python -m bench.dashboard_bench [--nodes 10000] [--grow 20] [--no-browser]

In a fresh state directory a child process opens a `sky.Simulated` pool of `--nodes` nodes (a few of
them failing at start, `min_nodes` letting the pool go on) and broadcasts once; later, told to, it
broadcasts once a second (every broadcast adds two task events per node to the log). Meanwhile
`skyhive dashboard` runs as its own process and is measured:

- start: from starting the dashboard to its first answer (it reads every log once before serving);
- each JSON route of the pool's page (pools, the pool, a page of nodes, events, the timeline: the
  first request, which the refresher may have built ahead, and cached), median of 5;
- with a headless Chromium (Debian's chromium + chromium-driver, when present): the pools page and
  the pool's page loaded until drawn (the nodes table and the timeline's SVG), median of 3;
- while the log grows for `--grow` seconds: the pool's summary and timeline asked again and again,
  their median and worst latency, and how much the log grew meanwhile;
- in the bench's own process over the final log: reading and folding it whole, building its timeline.

Target (issue 30): the 10,000-node pool's page and its timeline load in under 2 s. Measured, not
asserted: the machine's load average is printed with the figures. Results: docs/dashboard.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

CHILD = """
import os, sys, time
import anyio
import skyhive as sky

def nop():
    return 1

async def main(nodes, grow, stop):
    fail = {7: "bootstrapping", nodes // 2: "connecting", nodes - 3: "launch"}
    async with sky.Pool(provider=sky.Simulated(fail=fail), nodes=nodes, min_nodes=nodes - 10, output=None) as pool:
        await pool.broadcast(nop)
        print("UP", pool.id, flush=True)
        while not os.path.exists(stop):
            if os.path.exists(grow):  # the log grows: a broadcast (2 events a node) a second
                await pool.broadcast(nop)
            await anyio.sleep(1.0)

anyio.run(main, int(sys.argv[1]), sys.argv[2], sys.argv[3])
"""


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Client:
    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> tuple[float, int, int]:
        """(seconds, status, bytes) of one GET."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        t = time.perf_counter()
        conn.request("GET", path, headers=self.headers)
        resp = conn.getresponse()
        body = resp.read()
        took = time.perf_counter() - t
        conn.close()
        return took, resp.status, len(body)


def _median(client: Client, path: str, n: int = 5) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(n):
        took, status, size = client.get(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status}")
        times.append(took)
    return statistics.median(times), size


def _browser_loads(url: str, base: str, pool: str, repeat: int = 3) -> dict[str, float]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return {}
    if not (os.access("/usr/bin/chromium", os.X_OK) and os.access("/usr/bin/chromedriver", os.X_OK)):
        return {}
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    out: dict[str, list[float]] = {"pools page": [], "pool page (nodes + timeline)": []}
    try:
        driver.get(url)  # the token, then kept in the tab (sessionStorage: about:blank and back keep it)
        for _ in range(repeat):
            for name, target, ready in (
                ("pools page", base + "/#/", "return document.querySelectorAll('#pools tbody tr').length > 0"),
                ("pool page (nodes + timeline)", base + f"/#/pool/{pool}",
                 "return document.querySelectorAll('#nodes tbody tr').length > 0 && "
                 "document.querySelectorAll('#timeline svg rect').length > 0"),
            ):
                driver.get("about:blank")
                t = time.perf_counter()
                driver.get(target)
                while not driver.execute_script(ready):
                    if time.perf_counter() - t > 120:
                        raise RuntimeError(f"{name} did not load in 120 s")
                    time.sleep(0.01)
                out[name].append(time.perf_counter() - t)
    finally:
        driver.quit()
    return {k: statistics.median(v) for k, v in out.items() if v}


def run(nodes: int, grow: float, browser: bool) -> dict[str, Any]:
    results: dict[str, Any] = {"nodes": nodes, "load_before": _load()}
    with tempfile.TemporaryDirectory(prefix="skyhive-dash-bench-") as home:
        env = {**os.environ, "SKYHIVE_HOME": home}
        stop, grow_mark = os.path.join(home, "stop"), os.path.join(home, "grow")
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(nodes), grow_mark, stop], env=env,
                                 stdout=subprocess.PIPE, text=True)
        dash = None
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            if not line.startswith("UP"):
                raise RuntimeError(f"the pool did not start: {line!r}")
            pool = line.split()[1]
            log = Path(home) / "pools" / f"{pool}.jsonl"
            results["log_bytes_at_start"] = log.stat().st_size
            t = time.perf_counter()
            dash = subprocess.Popen([sys.executable, "-m", "skyhive", "dashboard", "--port", "0"], env=env,
                                    stdout=subprocess.PIPE, text=True)
            assert dash.stdout is not None
            found = re.search(r"http://127\.0\.0\.1:(\d+)/#token=(\S+)", dash.stdout.readline())
            if not found:
                raise RuntimeError("the dashboard printed no URL")
            client = Client(int(found.group(1)), found.group(2))
            while True:
                try:
                    client.get("/api/pools")
                    break
                except OSError:
                    time.sleep(0.02)
            results["start_to_first_answer_s"] = time.perf_counter() - t
            routes = {
                "pools": "/api/pools",
                "pool": f"/api/pools/{pool}",
                "nodes (a page of 100)": f"/api/pools/{pool}/nodes?limit=100",
                "nodes failed": f"/api/pools/{pool}/nodes?state=failed",
                "events (200)": f"/api/pools/{pool}/events",
                "events of node 7": f"/api/pools/{pool}/events?node=7",
            }
            took, _, size = client.get(f"/api/pools/{pool}/timeline")
            results["timeline first"] = (took, size)
            for name, path in routes.items():
                results[name] = _median(client, path)
            results["timeline cached"] = _median(client, f"/api/pools/{pool}/timeline")
            if browser:
                url = f"http://127.0.0.1:{client.port}/#token={client.headers['Authorization'].split(' ', 1)[1]}"
                results["browser"] = _browser_loads(url, f"http://127.0.0.1:{client.port}", pool)
            # responsiveness while the log grows
            size0 = log.stat().st_size
            Path(grow_mark).touch()
            summary, timeline = [], []
            deadline = time.monotonic() + grow
            while time.monotonic() < deadline:
                summary.append(client.get(f"/api/pools/{pool}")[0])
                timeline.append(client.get(f"/api/pools/{pool}/timeline")[0])
                time.sleep(0.1)
            results["growing"] = {
                "log_grew_bytes": log.stat().st_size - size0, "seconds": grow,
                "pool median/max s": (statistics.median(summary), max(summary)),
                "timeline median/max s": (statistics.median(timeline), max(timeline)),
            }
        finally:
            Path(stop).touch()
            if dash is not None:
                dash.terminate()
                dash.wait()
            try:
                child.wait(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        # what building the timeline costs, in this process over the same log (what a page that asks
        # first, before the dashboard's refresher built it, waits for)
        os.environ["SKYHIVE_HOME"] = home
        from skyhive.runtime.dashboard import views
        from skyhive.runtime.dashboard.watch import StateDir

        store = StateDir(Path(home) / "pools")
        t = time.perf_counter()
        while store.refresh():
            pass
        results["read whole log s"] = time.perf_counter() - t
        t = time.perf_counter()
        views.timeline_json(store, pool)
        results["timeline build s"] = time.perf_counter() - t
        results["log_bytes_at_end"] = log.stat().st_size
    results["load_after"] = _load()
    return results


def report(r: dict[str, Any]) -> str:
    lines = [f"dashboard over a {r['nodes']:,}-node Simulated pool (load before {r['load_before']}, "
             f"after {r['load_after']})",
             f"  log at start: {r['log_bytes_at_start'] / 1e6:.1f} MB",
             f"  dashboard start to first answer (reads every log once): {r['start_to_first_answer_s']:.2f} s"]
    for key in ("pools", "pool", "nodes (a page of 100)", "nodes failed", "events (200)", "events of node 7",
                "timeline first", "timeline cached"):
        took, size = r[key]
        lines.append(f"  GET {key:<24} {took * 1000:8.1f} ms  {size / 1024:8.1f} KiB")
    for name, took in (r.get("browser") or {}).items():
        lines.append(f"  browser: {name:<30} {took:.2f} s")
    if "browser" in r and not r["browser"]:
        lines.append("  browser: skipped (no selenium or no /usr/bin/chromium + chromedriver)")
    lines.append(f"  in-process over the final {r['log_bytes_at_end'] / 1e6:.1f} MB log: read and fold "
                 f"{r['read whole log s']:.2f} s, build the timeline {r['timeline build s']:.2f} s")
    g = r["growing"]
    lines.append(f"  while the log grew {g['log_grew_bytes'] / 1e6:.1f} MB in {g['seconds']:.0f} s: "
                 f"pool {g['pool median/max s'][0] * 1000:.0f}/{g['pool median/max s'][1] * 1000:.0f} ms, "
                 f"timeline {g['timeline median/max s'][0] * 1000:.0f}/{g['timeline median/max s'][1] * 1000:.0f} ms "
                 "(median/max)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--grow", type=float, default=20.0, help="seconds of requests while the log grows")
    parser.add_argument("--no-browser", action="store_true", help="JSON routes only")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args(argv)
    r = run(args.nodes, args.grow, not args.no_browser)
    print(report(r))
    if args.json:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
