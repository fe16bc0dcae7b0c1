"""Twenty SkyPilot invocations, from SkyPilot's docs and `examples/`, with only `sky` -> `skyhive` (issue 39,
done-when 5): each runs as written, runs with one edit (named in the table: a cloud -> Local), or is
refused clearly (exit 2 naming what is not there and what to do) — none refused generically (argparse's
"invalid choice", "unrecognized arguments", "arguments are required", a traceback) and none wrong (each
that runs is checked for what SkyPilot's does). The table is printed (`pytest -s`) and written to
$SKYHIVE_INVOCATIONS_TABLE when that is set.

Sources (skypilot-org/skypilot): `examples/minimal.yaml` and `examples/multi_hostname.yaml` (verbatim in
tests/commands/skypilot/, with their usage lines), `docs/source/reference/auto-stop.rst` (launch -d -c,
autostop -i/--down/--cancel), `docs/source/reference/api-server/...` ("sky logs --no-follow my_cluster",
"sky jobs launch --async job.yaml"), the CLI reference (`sky check`, `show-gpus`, `status [--ip]`, `queue`,
`logs CLUSTER JOB`, `exec`, `stop`, `start`, `down`, `serve up`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture: named pools down, nothing left

HERE = Path(__file__).with_name("skypilot")
GENERIC = ("invalid choice", "unrecognized arguments", "arguments are required", "Traceback (most recent call last)")

pytestmark = [pytest.mark.slow]


@dataclass
class Invocation:
    source: str
    sky: str  # as SkyPilot's docs write it
    edit: str = ""  # the one edit it needs here ("" none)
    refused: bool = False  # expected to be refused clearly (exit 2, saying why)
    check: Callable[[subprocess.CompletedProcess[str]], bool] | None = None


def _argv(line: str) -> list[str]:
    import shlex

    words = shlex.split(line)
    assert words[0] == "sky"
    return words[1:]


def _job_done(done: subprocess.CompletedProcess[str]) -> bool:
    return "submitted" in done.stdout


INVOCATIONS = [
    Invocation("CLI reference", "sky check", check=lambda d: "aws:" in d.stdout and "ranks offers of" in d.stdout),
    Invocation("CLI reference", "sky show-gpus A100:8", check=lambda d: "A100" in d.stdout and "8" in d.stdout),
    Invocation("examples/minimal.yaml", "sky launch -c min minimal.yaml", edit="--infra local (its infra: aws)",
               check=lambda d: "hello, SkyPilot!" in d.stdout and "running setup" in d.stdout),
    Invocation("examples/minimal.yaml", "sky down min", check=lambda d: "pool min: down" in d.stderr),
    Invocation("examples/multi_hostname.yaml", "sky launch multi_hostname.yaml",
               check=lambda d: d.stdout.count("My hostname: ") == 2),
    Invocation("reference/auto-stop.rst", "sky launch -d -c mycluster cluster.yaml",
               check=lambda d: "queued on pool mycluster" in d.stderr),
    Invocation("reference/auto-stop.rst", "sky autostop mycluster -i 10",
               check=lambda d: "stop after 10 min idle" in d.stdout),
    Invocation("reference/auto-stop.rst", "sky autostop mycluster -i 10 --down",
               check=lambda d: "down after 10 min idle" in d.stdout),
    Invocation("reference/auto-stop.rst", "sky autostop mycluster --cancel",
               check=lambda d: "autostop cancelled" in d.stdout),
    Invocation("CLI reference", "sky status", check=lambda d: "mycluster" in d.stdout),
    Invocation("CLI reference", "sky status --ip mycluster", check=lambda d: d.stdout == "127.0.0.1\n"),
    Invocation("CLI reference", "sky queue mycluster", check=lambda d: "multi_hostname" in d.stdout),
    Invocation("CLI reference", "sky logs mycluster 1",  # follows job 1 to its end
               check=lambda d: d.stdout.count("My hostname: ") == 2 and "job 1 succeeded" in d.stdout),
    Invocation("api-server docs", "sky logs --no-follow mycluster", check=lambda d: "My hostname: " in d.stdout),
    Invocation("CLI reference", "sky exec mycluster 'echo hello SkyPilot'",  # a command: the head only, as SkyPilot's
               check=lambda d: d.stdout.count("hello SkyPilot") == 1 and "[node 0] hello SkyPilot" in d.stdout),
    Invocation("CLI reference", "sky stop mycluster", check=lambda d: "pool mycluster: stopped" in d.stderr),
    Invocation("CLI reference", "sky start mycluster", check=lambda d: d.returncode == 0),
    Invocation("CLI reference", "sky down mycluster", check=lambda d: "pool mycluster: down" in d.stderr),
    Invocation("api-server docs", "sky jobs launch --async job.yaml", check=_job_done),
    Invocation("CLI reference", "sky serve up service.yaml", refused=True,
               check=lambda d: "skyhive has no serving" in d.stderr),
]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_", "CLOUDSDK_",
                                                                      "DIGITALOCEAN_"))}
    env["HOME"] = str(home)  # no cloud credentials: a cloud is never reached by accident
    env["AWS_EC2_METADATA_DISABLED"] = "true"  # nor the instance metadata address (botocore's chain asks it)
    return env


def _wait_managed_job_ends(env: dict[str, str], cwd: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        q = subprocess.run([sys.executable, "-m", "skyhive", "jobs", "queue", "--json"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=60)
        jobs = [json.loads(ln) for ln in q.stdout.splitlines()]
        if jobs and all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs):
            assert all(j["state"] == "SUCCEEDED" for j in jobs), jobs
            return
        time.sleep(0.3)
    raise AssertionError("the managed job did not end within 180 s")


def test_twenty_skypilot_invocations_run_as_written_with_an_edit_or_are_refused_clearly(tmp_path, clean):
    home = tmp_path / "home"
    home.mkdir()
    for name in ("minimal.yaml", "multi_hostname.yaml"):
        shutil.copy(HERE / name, tmp_path / name)
    shutil.copy(HERE / "multi_hostname.yaml", tmp_path / "cluster.yaml")  # auto-stop.rst's cluster.yaml
    (tmp_path / "job.yaml").write_text("name: job\nrun: echo managed hello\n")
    (tmp_path / "service.yaml").write_text("service:\n  readiness_probe: /\nrun: python -m http.server 8080\n")
    env = _env(home)
    rows, wrong = [], []
    for inv in INVOCATIONS:
        argv = _argv(inv.sky)
        as_written = subprocess.run([sys.executable, "-m", "skyhive", *argv], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=300)
        done, how = as_written, "as written"
        if inv.edit:
            # as written it must fail clearly (a cloud without credentials), then the edit runs it
            clear = as_written.returncode != 0 and not any(g in as_written.stderr for g in GENERIC)
            if not clear:
                wrong.append(f"{inv.sky}: as written it did not fail clearly: {as_written.stderr[-300:]}")
            edited = [*argv[:1], *inv.edit.split(" (")[0].split(), *argv[1:]]
            done = subprocess.run([sys.executable, "-m", "skyhive", *edited], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
            how = f"with an edit: {inv.edit}"
        if inv.refused:
            how = "refused clearly"
            ok = done.returncode == 2
        else:
            ok = done.returncode == 0
        if any(g in done.stderr for g in GENERIC):
            ok = False
            how += " (GENERIC)"
        if ok and inv.check is not None and not inv.check(done):
            ok = False
        if not ok:
            wrong.append(f"{inv.sky} -> exit {done.returncode}\n{done.stdout[-600:]}\n{done.stderr[-600:]}")
        rows.append((inv.sky.replace("sky ", "skyhive ", 1), inv.source, how if ok else f"WRONG ({how})"))
        if argv[:2] == ["jobs", "launch"] and done.returncode == 0:
            _wait_managed_job_ends(env, tmp_path)
    width = max(len(r[0]) for r in rows)
    table = [f"{'INVOCATION':<{width}}  {'OUTCOME':<46}  SOURCE"]
    table += [f"{cmd:<{width}}  {how:<46}  {src}" for cmd, src, how in rows]
    counts = {k: sum(1 for r in rows if r[2].startswith(k)) for k in ("as written", "with an edit", "refused clearly",
                                                                         "WRONG")}
    table.append(f"{len(rows)} invocations: {counts['as written']} as written, {counts['with an edit']} with an edit, "
                 f"{counts['refused clearly']} refused clearly, {counts['WRONG']} wrong or generic")
    text = "\n".join(table)
    print("\n" + text)
    if os.environ.get("SKYHIVE_INVOCATIONS_TABLE"):
        Path(os.environ["SKYHIVE_INVOCATIONS_TABLE"]).write_text(text + "\n")
    assert len(rows) == 20
    assert not wrong, "\n\n".join(wrong)
