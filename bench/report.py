"""Turn the measured figures into the table (console) and the Markdown report (bench/results.md)."""

from __future__ import annotations

import dataclasses
import statistics

from bench.common import Params

PEERS = ("floor", "ray", "dask")


@dataclasses.dataclass(frozen=True)
class Metric:
    label: str
    workload: str
    field: str
    kind: str  # "time" (lower is better) or "tasks"/"gbs" (higher is better)
    noun: str  # what the ratio compares: "latency", "throughput", "start time"
    # system -> the workload that stands for it on this row (None: not shown); default: workload.
    # "other:workload" reads it from the results of system `other` (measured in that one's process)
    per_system: dict | None = None

    def source(self, system: str) -> str | None:
        if self.per_system is None:
            return self.workload
        return self.per_system.get(system)

    def where(self, results: dict, system: str) -> tuple[dict | None, str | None]:
        """(the results holding this row's figure for `system`, the workload's name there)."""
        workload = self.source(system)
        if workload is not None and ":" in workload:
            owner, workload = workload.split(":", 1)
            return results.get(owner), workload
        return results.get(system), workload


def metrics(p: Params, cold_runs: int) -> list[Metric]:
    return [
        Metric(f"rtt, median of {p.rtt_n}", "rtt", "median_s", "time", "latency"),
        Metric("rtt, p90", "rtt", "p90_s", "time", "latency"),
        Metric(f"broadcast2, median of {p.bcast_n}", "broadcast2", "median_s", "time", "latency"),
        *(Metric(f"{w}, in turns with the floor, {where}, median of {n}", f"{w}_paired_{tag}", "median_s",
                 "time", "latency", {"floor": f"skyhive:{w}_paired_{tag}_floor", "skyhive": f"{w}_paired_{tag}"})
          for where, tag in (("one core", "one_core"), ("two cores", "two_cores"))
          for w, n in (("rtt", p.rtt_n), ("broadcast2", p.bcast_n))),
        Metric(f"map{p.map_items // 1000}k, tasks/s (median of ≥{p.map_reps})", "map10k",
               "tasks_per_s", "tasks", "throughput"),
        Metric("map10k, floor batched like skyhive", "map10k", "tasks_per_s", "tasks",
               "throughput", {"floor": "map10k_batched", "skyhive": "map10k"}),
        Metric(f"cold, s (median of {cold_runs} fresh starts)", "cold", "cold_s", "time",
               "start time"),
        Metric(f"script: import → pool → first call → close, s (median of {p.script_runs}, in turns)", "script",
               "", "time", "script time", {"floor": "script", "skyhive": "script"}),
        Metric(f"arg{p.arg_mib}m, GB/s (median of {p.arg_reps})", "arg100m", "gb_per_s", "gbs",
               "throughput"),
        Metric(f"arg1g ({p.arg1g_mib} MiB), GB/s (median of {p.arg1g_reps})", "arg1g", "gb_per_s", "gbs",
               "throughput"),
        Metric(f"arg{p.arg_mib}m sent again to both, median of {p.arg_reps}", "arg_again", "median_s", "time",
               "latency"),
        Metric(f"map of {p.shared_items} sharing a {p.arg_mib} MiB partial, median", "map_shared", "median_s",
               "time", "latency"),
        Metric(f"map of {p.shared_items}, plain (same run)", "map_shared", "plain_s", "time", "latency"),
    ]


# ------------------------------------------------------------------------------ formatting


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms" if s < 0.1 else f"{s * 1e3:.0f} ms"
    return f"{s:.2f} s"


def fmt_value(m: Metric, v: float) -> str:
    if m.kind == "time":
        return fmt_time(v)
    if m.kind == "tasks":
        return f"{v:,.0f}/s"
    return f"{v:.2f} GB/s"


def fmt_ratio(r: float) -> str:
    if r >= 10:
        return f"{r:.0f}×"
    if r >= 0.1:
        return f"{r:.2f}×"
    return f"{r:.3f}×"


def value(results: dict, system: str, m: Metric) -> float | None:
    res, workload = m.where(results, system)
    if not res or res.get("status") == "unavailable" or workload is None:
        return None
    if workload == "cold":
        xs = [c[m.field] for c in res.get("colds", []) if m.field in c]
        return statistics.median(xs) if xs else None
    if workload == "script":
        xs = res.get("scripts") or []
        return statistics.median(xs) if xs else None
    w = res.get("workloads", {}).get(workload, {})
    return w.get(m.field)


def cell(results: dict, system: str, m: Metric) -> str:
    if m.source(system) is None:
        return ""
    res, workload = m.where(results, system)
    if res is None:
        return "not run"
    if res.get("status") == "unavailable":
        return "n/a"
    if res.get("workloads", {}).get(workload, {}).get("skipped") or (
            workload == "script" and not res.get("scripts") and not res.get("script_error")):
        return "not run"
    v = value(results, system, m)
    return "error" if v is None else fmt_value(m, v)


def ratio_cell(results: dict, subject: str, other: str, m: Metric) -> str:
    if m.source(subject) is None or m.source(other) is None:
        return ""
    a, b = value(results, subject, m), value(results, other, m)
    if a is None or b is None or b == 0:
        return "—"
    return f"{fmt_ratio(a / b)} {other} {m.noun}"


def status_cell(res: dict | None) -> str:
    if res is None:
        return "not run"
    st = res.get("status")
    if st == "unavailable":
        return "not installed" if "pip install" in str(res.get("reason")) else "not available"
    w = res.get("workloads", {})
    bad = [k for k, v in w.items() if "error" in v] + (["cold"] if res.get("cold_errors") else []) + (
        ["script"] if res.get("script_error") else [])
    if st == "ok" and not bad:
        return "ok"
    return "partial" if w else "error"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt(rows[0]), sep] + [fmt(r) for r in rows[1:]])


def header_line(facts: dict) -> str:
    v = facts["versions"]
    vers = ", ".join(f"{k} {v[k]}" for k in v)
    load = ""
    if facts.get("load_start") is not None:
        load = f"load avg {facts['load_start']:.2f} at start"
        if facts.get("load_end") is not None:
            load += f", {facts['load_end']:.2f} at end"
    return (f"{facts['date']} · {facts['cores']}, {facts['cpu']}, {facts['mem']} · {facts['os']}"
            f" · {facts['python']} · {vers}" + (f" · {load}" if load else ""))


# --------------------------------------------------------------------------------- render


@dataclasses.dataclass
class Rendered:
    console: str
    full: str


def render(results: dict, systems: list[str], facts: dict, p: Params, cold_runs: int,
           command: str, elapsed: float) -> Rendered:
    ms = metrics(p, cold_runs)
    shown = [s for s in ("floor", "skyhive", "ray", "dask") if s in systems]
    sky_others = [o for o in PEERS if o in systems] if "skyhive" in systems else []
    measured = [s for s in systems
                if results.get(s) and results[s].get("status") != "unavailable"]
    peer_pairs = [(a, b) for a, b in (("ray", "floor"), ("dask", "floor"), ("ray", "dask"))
                  if a in measured and b in measured]

    head = ["workload"] + shown + [f"skyhive vs {o}" for o in sky_others]
    rows = [head, ["status"] + [status_cell(results.get(s)) for s in shown] + [""] * len(sky_others)]
    for m in ms:
        rows.append([m.label] + [cell(results, s, m) for s in shown]
                    + [ratio_cell(results, "skyhive", o, m) for o in sky_others])
    main_table = table(rows)

    peer_rows = [["workload"] + [f"{a} vs {b}" for a, b in peer_pairs]]
    for m in ms:
        if m.per_system is None:
            peer_rows.append([m.label] + [ratio_cell(results, a, b, m) for a, b in peer_pairs])
    peer_table = table(peer_rows) if peer_pairs else ""

    status_lines = []
    for s in shown:
        r = results.get(s)
        if r is None:
            continue
        if r.get("status") == "unavailable":
            reason = r.get("reason", "")
            status_lines.append(f"{s}: {reason}" if "pip install" in reason
                                else f"{s}: not available ({reason})")
        elif r.get("status") != "ok":
            status_lines.append(f"{s}: {r.get('reason')}")
        for k, w in r.get("workloads", {}).items():
            if "error" in w:
                status_lines.append(f"{s} {k}: {w['error']}")
            elif w.get("truncated"):
                status_lines.append(f"{s} {k}: stopped early after {w.get('n')} (time budget "
                                    f"{p.budget_s:g} s), the median is of those")
        for e in r.get("cold_errors", []):
            status_lines.append(f"{s} cold: {e}")
        if r.get("script_error"):
            status_lines.append(f"{s} script: {r['script_error']}")

    legend = ("Ratios are the first system's figure divided by the other's: \"2.0× ray "
              "latency\" = takes twice as long as Ray; \"3.0× ray throughput\" = does three "
              "times as much per second as Ray.")
    peer_block = ["", "Peers against each other and the floor:", "", peer_table] if peer_table else []
    console = "\n".join([main_table, *status_lines, "", legend, *peer_block])

    notes = _notes(results, p, cold_runs)
    full = "\n".join([
        "# skyhive benchmarks",
        "",
        header_line(facts),
        "",
        f"Command: `{command}` ({elapsed:.0f} s). Medians; the machine is noisy, so compare "
        "figures only within one run.",
        "",
        main_table,
        "",
        *([f"- {line}" for line in status_lines] + [""] if status_lines else []),
        legend,
        *(["", "## Peers against each other and the floor", "", peer_table] if peer_table else []),
        "",
        "## What was measured",
        "",
        *notes,
        "",
    ])
    return Rendered(console=console, full=full)


def _notes(results: dict, p: Params, cold_runs: int) -> list[str]:
    mib = p.arg_mib
    out = [
        "Same functions for every system, shipped by value (compiled into a module that is not "
        "importable, like a script's own functions): `nop() -> 1`, `inc(x) -> x + 1`, "
        "`nbytes(a) -> a.nbytes`. Each system runs in its own process; two workers each.",
        "",
        f"- **rtt**: `run(nop)` one at a time after {p.rtt_warmup} warm-up calls; median and p90 "
        f"of {p.rtt_n}.",
        f"- **broadcast2**: `nop` on both workers, gathered; {p.bcast_warmup} warm-up, median of "
        f"{p.bcast_n}.",
        f"- **rtt / broadcast2, in turns with the floor, one core / two cores**: the same two "
        "workloads again, skyhive's from its process and the floor's from a process of its own "
        "(`bench/floor_turns.py`, told when to take its turn: beside an open skyhive pool the floor's "
        "client was ~5% slower), every process pinned (`sched_setaffinity`, each thread): both "
        "clients and every worker on one CPU, then the clients on one CPU and the workers on the "
        "other. Per placement, both warmed up, then "
        f"rounds of {max(10, p.rtt_n // 20)} (broadcast2: {max(10, p.bcast_n // 20)}) calls, floor and "
        "skyhive in turn, the order reversed every other round, until each made "
        f"{p.rtt_n} (broadcast2: {p.bcast_n}); median of each one's calls. The ratio to the floor is "
        "read from these rows. Why: the rows above come from processes run minutes apart, and the "
        "floor's rtt there is bimodal (24 µs or 50-70 µs from run to run on this 2-core machine): a "
        "client and its worker on one core answer in about half the time they take on two (a "
        "wake-up across cores is slow here), and left free the scheduler settles each pair of "
        "processes on one core or two by what else runs — within one run the floor's pair on two "
        "and skyhive's on one, or the reverse, even with the rounds taken in turn. Pinned, both "
        "systems run alike. On one core a call costs about the CPU time of both sides; on two, "
        "mostly the wake-ups.",
        f"- **map10k**: `map(inc, range({p.map_items}))`, results checked in input order; "
        f"items / median time of at least {p.map_reps} runs (more, up to 50, while they add up "
        f"to less than {p.map_min_s:g} s; after a 200-item warm-up). Each system's map "
        "as its users call it; skyhive's `pool.map` sends items in batches, the floor's `map` "
        "and Ray's and Dask's do not, so the next row also compares skyhive with the floor "
        "batching the same way (`FloorPool.map_batched`: chunks of min(1000, ⌈n / (4 × "
        "workers)⌉) items, one request per chunk, two chunks in flight per worker).",
        f"- **cold**: in a fresh process, after the library is imported: pool/cluster start → "
        f"first result of `nop`, 2 workers; median of {cold_runs} fresh processes, run in "
        "rounds over the systems. Import time and shutdown time are listed below, not included "
        "(skyhive's import is `import skyhive`, `sky.Pool`, `sky.Local` and `sky.preload()`: the runtime "
        "that `sky.Pool` imported when this row was defined and a pool's start imports since its workers "
        "start first).",
        f"- **script**: the whole life of the script a user writes first, in a fresh interpreter from spawn "
        "to exit (`python -c`, bytecode caches on: `PYTHONDONTWRITEBYTECODE` removed, one unmeasured run "
        "each first) — skyhive's `import skyhive as sky; with sky.Pool(provider=sky.Local(), nodes=2, "
        "output=None) as pool: pool.run(nop)` beside the floor's: two bare Python workers (`python -c`) "
        "that import cloudpickle and msgpack, answer a line and exit when their stdin closes, the script "
        f"waiting for both (`bench/script_life.py`). {p.script_runs} rounds, floor and skyhive in turn, the "
        "order reversed every other round; median of each. Unlike **cold**, import, Python's own start "
        "and the close are in it.",
        f"- **arg{mib}m**: a {mib} MiB numpy uint8 array passed as the argument of `nbytes` on "
        f"both workers; GB/s = 2 × {mib} MiB / time (GB = 10^9 bytes); one warm-up, median of "
        f"{p.arg_reps}.",
        "",
        "Systems:",
        "",
        "- **floor** (`bench/floor.py`): bare worker subprocesses (`bench/_floor_worker.py`) on "
        "asyncio subprocess pipes. Frames are a 4-byte big-endian length + msgpack "
        "`[id, cloudpickle(fn), cloudpickle((args, kwargs), protocol 5), n_buffers, batch]`, "
        "then each "
        "out-of-band buffer as a raw frame written from the array's memory in 1 MiB slices "
        "(pipe raised to 1 MiB with F_SETPIPE_SZ). The function's pickle is made once per "
        "function and cached on both sides; the arguments are pickled per call. `run` → least "
        "busy worker (ties: the first); `broadcast` pickles once, writes to both; `map` sends one request per "
        "item with at most 64 in flight over both workers (least busy first), no batching. "
        "Replies: msgpack `[id, ok, cloudpickle(result)]`, one write each.",
        "- **skyhive** (`bench/skyhive_bench.py`): `async with sky.Pool(provider=sky.Local(), "
        "nodes=2) as pool` then `await pool.run(nop)`, `await pool.broadcast(nop)`, "
        "`await pool.map(inc, items)`, `await pool.broadcast(nbytes, arr)`.",
        "- **ray** (`bench/peers.py`): `ray.init(num_cpus=2)`; `ray.get(f.remote())`; broadcast "
        "= two tasks `ray.get([f.remote(), f.remote()])` (Ray cannot pin a task to a worker "
        "process); map = 10,000 `.remote` calls then one `ray.get`; arg = "
        "`ray.get([g.remote(arr), g.remote(arr)])` (no manual `ray.put`).",
        "- **dask** (`bench/peers.py`): `LocalCluster(n_workers=2, threads_per_worker=1, "
        "processes=True)` + `Client`; `client.submit(f, pure=False).result()`; broadcast = one "
        "`submit(..., workers=[w])` per worker, gathered; map = `client.map(inc, items, "
        "pure=False)` + `gather`; arg = the broadcast with the array as argument (the same user "
        "code as `pool.broadcast(g, arr)`; Dask warns about large graphs here — the scatter "
        "variant is below).",
        "",
        "Ray passes large arguments through its shared-memory object store rather than a pipe, "
        "so its arg figure can beat the pipe floor; its runs tend to be bimodal (tens of ms or "
        "hundreds), so read the individual runs below.",
    ]
    extra = []
    for s in ("floor", "skyhive", "ray", "dask"):
        r = results.get(s)
        if not r or r.get("status") == "unavailable":
            continue
        colds = r.get("colds", [])
        if r.get("load_before") is not None:
            extra.append(f"- {s}: 1-minute load average {r['load_before']:.2f} when its warm "
                         "run started")
        if colds:
            runs = ", ".join(f"{c['cold_s']:.3f}" for c in colds)
            imp = [c["import_s"] for c in colds if c.get("import_s") is not None]
            shut = [c["shutdown_s"] for c in colds if c.get("shutdown_s") is not None]
            extra.append(f"- {s} cold starts (s): {runs}; import "
                         f"{statistics.median(imp):.2f} s, shutdown "
                         f"{statistics.median(shut):.2f} s (medians)" if imp and shut else
                         f"- {s} cold starts (s): {runs}")
        if r.get("scripts"):
            load = r.get("script_load")
            extra.append(f"- {s} script lives (s): " + ", ".join(f"{t:.3f}" for t in r["scripts"])
                         + (f" (1-minute load average {load:.2f} when they started)" if load is not None else ""))
        w = r.get("workloads", {})
        for k in ("map10k", "map10k_batched"):
            ts = w.get(k, {}).get("all_s")
            if ts:
                shown_ts = ", ".join(f"{t:.4f}" for t in ts[:10]) + (", …" if len(ts) > 10 else "")
                extra.append(f"- {s} {k} runs (s, {len(ts)}): {shown_ts}")
        a = w.get("arg100m", {})
        if "all_s" in a:
            extra.append(f"- {s} arg{mib}m runs (s): " + ", ".join(f"{t:.3f}" for t in a["all_s"]))
        sc = w.get("arg100m_scatter")
        if sc:
            extra.append(
                f"- dask arg{mib}m with `client.scatter(arr, broadcast=True)` then one submit "
                f"per worker (timed together): "
                + (f"{sc['gb_per_s']:.2f} GB/s (median of {sc['n']})" if "gb_per_s" in sc
                   else sc.get("error", "error")))
    if extra:
        out += ["", "Details:", "", *extra]
    return out
