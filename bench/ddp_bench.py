"""DDP steady-state step time: the same training loop launched by skyhive and by torchrun, one run.

    python -m bench.ddp_bench [--rounds 5] [--steps 300] [--warmup 50]

skyhive: `sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.torch(backend="gloo")])` and
`pool.broadcast(ddp_loop, ...)`. torchrun: `python -m torch.distributed.run --nproc_per_node=2 -m
bench.ddp_bench --torchrun-worker ...`. Each round launches both afresh (a new pool, a new torchrun),
so both measure processes of the same age; rounds alternate between the two so drift in the
machine's load hits both alike.

Only the loop's steps after a warm-up and a barrier are timed (launch, imports and the first DDP
call are not: that is start-up, not steady state). A step is forward, backward (DDP's gradient
all-reduce over gloo) and the optimizer step, timed on every rank; a round's figure is the median
step of rank 0 (the ranks run in lock-step), and each launcher's figure the median of its rounds.
The ratio is skyhive / torchrun (target ≤ 1.02×); also shown: the median of the per-round ratios
(each skyhive round against the torchrun round right after it) and the ratio of the best rounds.

`run()` returns the figures as a dict; `main()` also prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.02


def ddp_loop(steps: int, warmup: int, batch: int = 64, width: int = 512) -> dict[str, Any]:
    """The measured loop (runs in a process of an initialized gloo process group)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                              nn.Linear(width, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, 256, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)

    def step() -> None:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    times = []
    start = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    times.sort()
    return {"rank": rank, "world": dist.get_world_size(), "median_s": statistics.median(times),
            "p90_s": times[int(0.9 * (len(times) - 1))], "mean_s": total / steps,
            "threads": torch.get_num_threads()}


# ---- the two launchers -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun_round(steps: int, warmup: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "rank0.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={_free_port()}", "-m", "bench.ddp_bench", "--torchrun-worker",
               f"--steps={steps}", f"--warmup={warmup}", f"--out={out}"]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=600)
        finally:  # torchrun and the workers it started: nothing outlives the round
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{stdout}\n{stderr}")
        return json.loads(out.read_text())


def _torchrun_worker(steps: int, warmup: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(backend="gloo", init_method="env://")
    try:
        result = ddp_loop(steps, warmup)
        if result["rank"] == 0:
            Path(out).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def run(rounds: int = 5, steps: int = 300, warmup: int = 50) -> dict[str, Any]:
    """Measure both launchers, alternating, and return the figures and the ratio."""
    import skyhive as sky

    rows: dict[str, list[dict[str, Any]]] = {"skyhive": [], "torchrun": []}
    plugins = [sky.plugins.torch(backend="gloo")]
    t0 = time.perf_counter()
    for _ in range(rounds):  # fresh processes each round on both sides: launch, warm up, measure
        with sky.Pool(provider=sky.Local(), nodes=2, plugins=plugins, log_events=False) as pool:
            rows["skyhive"].append(pool.broadcast(ddp_loop, steps, warmup)[0])
        rows["torchrun"].append(_torchrun_round(steps, warmup))
    figures = {}
    for name, results in rows.items():
        figures[name] = {
            "median_s": statistics.median(r["median_s"] for r in results),
            "p90_s": statistics.median(r["p90_s"] for r in results),
            "mean_s": statistics.median(r["mean_s"] for r in results),
            "threads": results[0]["threads"],
            "rounds": [r["median_s"] for r in results],
        }
    ratio = figures["skyhive"]["median_s"] / figures["torchrun"]["median_s"]
    # each skyhive round next to the torchrun round that followed it: load drift hits both alike
    paired = statistics.median(s["median_s"] / t["median_s"] for s, t in zip(rows["skyhive"], rows["torchrun"]))
    best = min(figures["skyhive"]["rounds"]) / min(figures["torchrun"]["rounds"])
    return {"workload": f"ddp step, 2 processes, gloo, {steps} steps after {warmup} warm-up, {rounds} rounds",
            "skyhive": figures["skyhive"], "torchrun": figures["torchrun"], "ratio": ratio,
            "paired_ratio": paired, "best_round_ratio": best,
            "target": TARGET, "ok": ratio <= TARGET, "elapsed_s": time.perf_counter() - t0}


def table(result: dict[str, Any]) -> str:
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    lines = [f"DDP steady state — {result['workload']}", "",
             "| launcher | step, median | step, p90 | step, mean | threads/process | rounds (median each) |",
             "|---|---|---|---|---|---|"]
    for name in ("torchrun", "skyhive"):
        f = result[name]
        lines.append(f"| {name} | {ms(f['median_s'])} | {ms(f['p90_s'])} | {ms(f['mean_s'])} | {f['threads']} | "
                     f"{', '.join(ms(r) for r in f['rounds'])} |")
    verdict = "within" if result["ok"] else "OVER"
    lines += ["", f"skyhive / torchrun: {result['ratio']:.3f}× (median step; {verdict} the {result['target']}× "
                  f"target) · paired rounds {result['paired_ratio']:.3f}× · best rounds "
                  f"{result['best_round_ratio']:.3f}× · {result['elapsed_s']:.0f} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(prog="python -m bench.ddp_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--torchrun-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.torchrun_worker:
        _torchrun_worker(args.steps, args.warmup, args.out)
        return None
    result = run(rounds=args.rounds, steps=args.steps, warmup=args.warmup)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
