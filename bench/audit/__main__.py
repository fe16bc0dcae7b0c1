"""Run the audit: extract each program, apply only bench/audit/rewrite.py's rules, run it, write the table.

    python -m bench.audit --skyward /work/.mirror/gabfssilva+skyward/repo --skypilot DIR [--only ID,ID] [--timeout 120]

--skyward is a git directory of github.com/gabfssilva/skyward (bare is fine: files are read with `git show`);
--skypilot a directory holding SkyPilot's files at the paths bench/audit/programs.py names (a checkout of
github.com/skypilot-org/skypilot, or just those files). One program at a time, each in its own temporary
directory and SKYHIVE_HOME, its own process group, killed at the timeout; `skyhive down -a --force -y` in that
home afterwards, then the directory is removed. Writes bench/audit/results.md (or --out).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.audit.programs import Program, programs
from bench.audit.rewrite import rewrite_command, rewrite_python, rewrite_yaml

log = logging.getLogger("bench.audit")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    program: Program
    verdict: str
    reason: str
    rules: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tail: str = ""


def _source(prog: Program, skyward: Path, skypilot: Path | None, path: str) -> str:
    if prog.origin == "skyward":
        return subprocess.run(["git", f"--git-dir={skyward}", "show", f"HEAD:{path}"], check=True,
                              capture_output=True, text=True).stdout
    if skypilot is None:
        raise FileNotFoundError(f"{prog.id}: needs --skypilot (SkyPilot's {path})")
    return (skypilot / path).read_text()


def _prepare(prog: Program, work: Path, skyward: Path, skypilot: Path | None, edits: bool) -> tuple[list[str], list[str]]:
    """Write the program (and its side files) under work; return (the command to run, the rules applied)."""
    rules: list[str] = []
    for path in prog.files:
        text = _source(prog, skyward, skypilot, path)
        if path.endswith(".py") and prog.origin == "skyward":
            text, applied = rewrite_python(text)
        elif path.endswith((".yaml", ".yml")):
            text, applied = rewrite_yaml(text)
        else:
            applied = []
        rules += [f"{path}: {r}" for r in applied]
        if edits:
            for old, new, _why in prog.edits:
                if old in text:
                    text = text.replace(old, new)
        dest = work / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    if prog.kind == "py":
        return [sys.executable, prog.files[0]], rules
    steps = []
    for step in prog.commands:
        new, applied = rewrite_command(step)
        rules += applied
        if edits:
            for old, new_text, _why in prog.edits:
                new = new.replace(old, new_text)
        steps.append(new)
    script = "set -e\n" + "\n".join(steps) + "\n"
    (work.parent / "steps.sh").write_text(script)  # beside the work directory: a step's `*` sees only the program's files
    return ["bash", str(work.parent / "steps.sh")], rules


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name)


def _run_once(prog: Program, skyward: Path, skypilot: Path | None, timeout: float, edits: bool,
              logs: Path | None = None) -> tuple[int | None, str, list[str], float]:
    top = Path(tempfile.mkdtemp(prefix="audit-" + _safe(prog.id) + "-"))
    work, home, user = top / "work", top / "home", top / "user"
    for folder in (work, home, user):
        folder.mkdir()
    # HOME too: what a program writes under ~ (`logs --sync-down` → ~/sky_logs) goes with the directory
    env = dict(os.environ, SKYHIVE_HOME=str(home), HOME=str(user), PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    try:
        cmd, rules = _prepare(prog, work, skyward, skypilot, edits)
        out = top / "output.txt"
        start = time.monotonic()
        with out.open("wb") as sink:
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            _kill_group(proc)
            proc.wait()
        seconds = time.monotonic() - start
        subprocess.run([str(Path(sys.executable).parent / "skyhive"), "down", "-a", "--force", "-y"], cwd=work,
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        text = out.read_text(errors="replace")
        if logs is not None:  # the whole output, to classify a failure by reading it
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{_safe(prog.id)}{'.edits' if edits else ''}.txt").write_text(text)
        return rc, text, rules, seconds
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line or "Exception" in line]
    last = (errors or lines or [""])[-1]
    return last.replace("|", "\\|")[:160]


def audit(prog: Program, skyward: Path, skypilot: Path | None, timeout: float, logs: Path | None = None) -> Outcome:
    try:
        rc, text, rules, seconds = _run_once(prog, skyward, skypilot, timeout, edits=False, logs=logs)
    except (OSError, subprocess.CalledProcessError) as exc:
        return Outcome(prog, "not run", f"could not extract: {exc}")
    if rc == 0:
        note = f" (recorded: {prog.why} — no longer true)" if prog.why else ""
        return Outcome(prog, "as written", "exit 0" + note, rules, seconds)
    first = Outcome(prog, "", "", rules, seconds, ("timeout: " if rc is None else f"rc {rc}: ") + _tail(text))
    if prog.edits:
        rc2, text2, _, seconds2 = _run_once(prog, skyward, skypilot, timeout, edits=True, logs=logs)
        listed = "; ".join(f"{why}" for _old, _new, why in prog.edits)
        if rc2 == 0:
            return Outcome(prog, "after edits", listed, rules, seconds2, first.tail)
        first.tail += " / after edits " + ("timeout: " if rc2 is None else f"rc {rc2}: ") + _tail(text2)
    first.verdict = prog.verdict or "unclassified"
    first.reason = prog.why or "(not classified yet: see the last line)"
    return first


def write_table(outcomes: list[Outcome], path: Path, header: str) -> None:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    order = ["as written", "after edits", "skyhive gap", "program/machine", "unclassified", "not run"]
    lines = [header, "", f"{len(outcomes)} programs: " + ", ".join(f"**{counts[k]} {k}**" for k in order if k in counts),
             "", "| # | program | verdict | reason / edits | s | last line |", "|---|---|---|---|---|---|"]
    for i, o in enumerate(outcomes, 1):
        lines.append(f"| {i} | {o.program.id} | {o.verdict} | {o.reason.replace('|', '/')} | {o.seconds:.0f} | "
                     f"{o.tail} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--skyward", type=Path, required=True, help="git dir of gabfssilva/skyward")
    parser.add_argument("--skypilot", type=Path, help="directory with SkyPilot's files (see programs.py)")
    parser.add_argument("--only", help="comma-separated program ids (default: all)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program (default 120)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "audit" / "results.md")
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "skyhive-audit-logs",
                        help="where each program's whole output is kept (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="print the program ids and exit")
    parser.add_argument("--list-files", action="store_true", help="print the SkyPilot files --skypilot must hold")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    chosen = programs(args.skyward)
    if args.list_files:
        for path in sorted({f for prog in chosen if prog.origin == "skypilot" for f in prog.files}):
            print(path)
        return
    if args.list:
        for prog in chosen:
            print(prog.id)
        return
    if args.only:
        wanted = set(args.only.split(","))
        chosen = [p for p in chosen if p.id in wanted]
    outcomes = []
    for prog in chosen:
        log.info("%s ...", prog.id)
        outcome = audit(prog, args.skyward, args.skypilot, args.timeout, args.logs)
        log.info("%s: %s (%.0f s) %s", prog.id, outcome.verdict, outcome.seconds, outcome.tail)
        outcomes.append(outcome)
        write_table(outcomes, args.out, HEADER)


HEADER = """# The real-programs audit (issue 40)

Made by `python -m bench.audit --skyward GITDIR --skypilot DIR` (bench/audit/__main__.py), one program at a
time, each in its own temporary directory and SKYHIVE_HOME, 120 s each. The programs (bench/audit/programs.py):
every `guides/*.py` and `sample.py` of Skyward (github.com/gabfssilva/skyward, the mirror's HEAD f43ac11), and
13 SkyPilot programs (github.com/skypilot-org/skypilot): 7 smoke tests' command sequences (their steps verbatim
but for the cluster name, from the plain-string form of tests/smoke_tests/test_basic.py) and 6 of today's
tests/test_yamls task files with the audit's own launch-and-check steps; `python -m bench.audit --list-files`
names the SkyPilot files it reads. The only rewrites (bench/audit/rewrite.py, tested by
tests/programs/test_audit_rewrite.py): `import skyward` → `import skyhive`, a cloud → `sky.Local()` (a task
file's `cloud:`/`infra:` → `local`, `--infra X` → `--infra local`), the `sky` command → `skyhive`.
"as written": exit 0 after only those; "after edits": exit 0 after the listed edits (the recorded reason says
why it failed as written); otherwise the recorded reason — a skyhive gap, or the program/this machine (no
GPU, no internet, ...) — and the run's last error line. Each program's whole output is kept under --logs."""

if __name__ == "__main__":
    main()
