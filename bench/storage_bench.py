"""Bucket transfers: skyhive's (runtime/storage/transfer.py) against boto3's transfer manager and rclone, to
the same S3 endpoint in the same run — `moto_server` on 127.0.0.1, started here.

    python -m bench.storage_bench                 # 1 GiB: one object, and 1,000 objects of 1 MiB
    python -m bench.storage_bench --size-mib 256  # smaller, on a busy machine
    python -m bench.storage_bench --json out.json
    python -m bench.storage_bench --cases many --reps 3   # the 1,000 objects only, best of 3 (order rotated)

Four cases, each direction once per tool: upload/download of one object of SIZE, and of 1,000 objects
totalling SIZE (each line and the table show /proc/loadavg). The tools: skyhive (parallel across objects,
objects under 8 MiB one request each, 16 at once; larger ones in 8 MiB parts);
boto3 (`upload_file`/`download_file`, the transfer manager's defaults, one call per object, as a user's
loop does it); rclone (`rclone copy`, its defaults but `--transfers 16`). Prints a Markdown table: MiB/s
(the best of `--reps`, the tools' order rotated each rep), the client's CPU seconds (rclone's included,
a child process), and skyhive over the best of the others. moto keeps objects in memory or temporary files and is itself
the bottleneck of a fast client: the figures compare clients against one endpoint, not S3's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MiB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("moto_server did not start") from None
            time.sleep(0.1)


def _loadavg() -> str:
    """/proc/loadavg's three averages (the machine's load colours every figure: print it beside them)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _rclone_env(endpoint: str) -> dict[str, str]:
    return {**os.environ, "RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Other",
            "RCLONE_CONFIG_BENCH_ENDPOINT": endpoint, "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": "testing",
            "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": "testing", "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true",
            "RCLONE_CONFIG_BENCH_REGION": "us-east-1"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--no-rclone", action="store_true")
    ap.add_argument("--reps", type=int, default=1, help="runs of each case per tool, the order rotated; the best kept")
    ap.add_argument("--cases", choices=("all", "one", "many"), default="all",
                    help="one object, many objects, or both (default)")
    args = ap.parse_args(argv)

    load_start = _loadavg()
    tmp = Path(tempfile.mkdtemp(prefix="skyhive-storage-bench-"))
    for var in [v for v in os.environ if v.startswith("AWS_")]:
        del os.environ[var]
    (tmp / "aws").write_text("")
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION":
                       "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp / "aws"),
                       "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "aws"), "SKYHIVE_HOME": str(tmp / "home")})
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
    proc = _server(port)
    try:
        import boto3

        from skyhive.runtime.storage import s3 as s3mod
        from skyhive.runtime.storage import transfer
        from skyhive.runtime.storage.spec import Bucket

        size = args.size_mib * MiB
        one = tmp / "one"
        one.mkdir()
        with open(one / "blob.bin", "wb") as fh:
            chunk = os.urandom(8 * MiB)
            for _ in range(size // len(chunk)):
                fh.write(chunk)
            fh.write(chunk[: size % len(chunk)])
        many = tmp / "many"
        many.mkdir()
        each = size // args.objects
        block = os.urandom(each)
        for i in range(args.objects):
            (many / f"obj-{i:05d}.bin").write_bytes(block[i % 7:] + block[: i % 7])
        plain = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        sky_access = s3mod.access(Bucket("bench-bucket"))
        sky_client = s3mod.client(sky_access)
        rows: dict[str, dict[str, float]] = {}

        cpu_rows: dict[str, dict[str, float]] = {}

        def cpu_seconds() -> float:
            me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime  # rclone is a child process

        def timed(case: str, tool: str, nbytes: int, fn: Callable[[], object]) -> None:
            start, cpu0 = time.perf_counter(), cpu_seconds()
            fn()
            took, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
            rate = nbytes / MiB / took
            if rate > rows.setdefault(case, {}).get(tool, 0.0):  # the best of --reps
                rows[case][tool] = rate
                cpu_rows.setdefault(case, {})[tool] = cpu
            print(f"{case:<34} {tool:<8} {took:7.2f} s  {rate:8.1f} MiB/s  client CPU {cpu:6.2f} s  "
                  f"load {_loadavg()}", flush=True)

        def reset() -> None:
            try:
                from skyhive.runtime.storage.buckets import delete_bucket

                delete_bucket(sky_client, "bench-bucket")
            except Exception:  # noqa: BLE001 - not there yet
                pass
            plain.create_bucket(Bucket="bench-bucket")

        def fresh(path: Path) -> Path:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            return path

        def boto3_up(src: Path, prefix: str) -> None:
            for f in sorted(src.iterdir()):
                plain.upload_file(str(f), "bench-bucket", f"{prefix}/{f.name}")

        def boto3_down(prefix: str, dest: Path) -> None:
            for o in transfer.list_prefix(plain, "bench-bucket", prefix):
                plain.download_file("bench-bucket", o.key, str(dest / o.key.rsplit("/", 1)[1]))

        def rclone(*a: str) -> None:
            subprocess.run(["rclone", "copy", "--transfers", "16", *a], env=_rclone_env(endpoint), check=True,
                           capture_output=True)

        tools = ["skyhive", "boto3"] + ([] if args.no_rclone or not shutil.which("rclone") else ["rclone"])
        cases = [(f"one object of {args.size_mib} MiB", one, 1),
                 (f"{args.objects} objects of {each // 1024} KiB", many, args.objects)]
        for label, src, count in [c for c in cases if args.cases == "all" or (args.cases == "one") == (c[2] == 1)]:
            nbytes = sum(f.stat().st_size for f in src.iterdir())
            for tool in [t for rep in range(args.reps) for t in (tools[rep % len(tools):] + tools[:rep % len(tools)])]:
                reset()
                prefix = f"{tool}-{count}"
                if tool == "skyhive":
                    timed(f"upload {label}", tool, nbytes, lambda: transfer.upload_dir(
                        sky_client, "bench-bucket", prefix, str(src), access=sky_access))
                    dest = fresh(tmp / "dest")
                    timed(f"download {label}", tool, nbytes,
                          lambda: transfer.download_prefix(sky_client, "bench-bucket", prefix, str(dest),
                                                           access=sky_access))
                elif tool == "boto3":
                    timed(f"upload {label}", tool, nbytes, lambda: boto3_up(src, prefix))
                    dest = fresh(tmp / "dest")
                    timed(f"download {label}", tool, nbytes, lambda: boto3_down(prefix, dest))
                else:
                    timed(f"upload {label}", tool, nbytes, lambda: rclone(str(src), f"bench:bench-bucket/{prefix}"))
                    dest = fresh(tmp / "dest")
                    timed(f"download {label}", tool, nbytes, lambda: rclone(f"bench:bench-bucket/{prefix}", str(dest)))
                got = sum(f.stat().st_size for f in dest.iterdir())
                if got != nbytes:
                    raise SystemExit(f"{tool}: downloaded {got} bytes of {nbytes}")
        print(f"\nload average (1, 5, 15 min) at the start: {load_start}; at the end: {_loadavg()}")
        print("| case | " + " | ".join(f"{t} MiB/s (CPU s)" for t in tools) + " | skyhive / best other |")
        print("|---|" + "---|" * (len(tools) + 1))
        for case, by_tool in rows.items():
            best = max(v for t, v in by_tool.items() if t != "skyhive")
            cells = " | ".join(f"{by_tool[t]:.1f} ({cpu_rows[case][t]:.1f})" for t in tools)
            print(f"| {case} | {cells} | {by_tool['skyhive'] / best:.2f}× |")
        if args.json:
            Path(args.json).write_text(json.dumps({"MiB/s": rows, "client CPU s": cpu_rows}, indent=2))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
