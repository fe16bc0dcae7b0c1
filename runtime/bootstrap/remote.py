"""Bootstrap any node that does not share this machine's Python, over its `Shell` (SSH and cloud hosts,
Slurm's login node, a third party's kind): the pool's `Image` built there, cached by content hash.

Steps, each bounded and each failure a `ProvisionError` subclass naming the node and the cause:

1. the node's first-boot command, when its shell names one (`Shell.ready_command`: cloud-init);
2. probe, in one command: the user's home, the Pythons there (`Shell.python` if the node names one, else
   `python3.X` for this client's 3.X, then `python3`), whether the runtime and environment directories
   below are complete. The worker's Python must match the client's major.minor (functions travel as
   bytecode); with none, `uv python install` when uv is there, else `PythonMismatch`;
3. runtime: skyhive, msgpack and cloudpickle as wheels of the client's exact versions
   (`bootstrap/wheels.py`), put on the node (`Shell.put`) and unpacked into `~/.skyhive/rt/<hash of the wheels>`;
4. environment: `~/.skyhive/envs/<hash>` where the hash covers the image's canonical form, the Python
   major.minor and the content of `includes` (`envkey.py`). Unless complete (`.ready`), the includes are put
   on the node and the node-side script (`bootstrap/script.py`) builds it under a lock: venv + pip packages
   (the image's indexes and find-links, given explicitly), apt (root or passwordless sudo), setup
   commands in order. Env vars and secrets reach the command through the shell's `env` (SSH: on its
   stdin), never on a command line or into a log;
5. the node's idle watchdog, when its shell asks for one (`Shell.idle_shutdown`);
6. the boot-time limit a cloud node's boot script set is lifted, when its shell names how
   (`Shell.boot_limit_off`): the node is now watched (step 5) or kept by its client.

A second pool with the same image on the same node finds both directories complete and skips 3–4
(the detail of the node's `ready` event says "cached"). The result is a `Prepared`: that detail and the
`NodeEnv` the node's workers run with (the venv's Python, the runtime on `PYTHONPATH`, ...).
Each step is logged (logger `skyhive.bootstrap`) and recorded as a `NodeProgress` event, which the pool's
provisioning display (`runtime/output/progress.py`) shows on a terminal.
"""

from __future__ import annotations

import json
import logging
import os
import secrets as _secrets
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ...providers.accelerators import devices_from_smi, warn_missing
from ...errors import BootstrapError, PythonMismatch, SetupFailed
from ...providers.base import ProvisionError
from ..events.types import NodeProgress
from ..nodes.shell import NodeEnv, Prepared, Shell
from .envkey import SCRIPT, env_key
from .output import ScriptOutput
from .wheels import runtime_wheels

if TYPE_CHECKING:
    from ..nodes.context import NodeContext

log = logging.getLogger("skyhive.bootstrap")

__all__ = ["prepare_remote", "PROBE_TIMEOUT"]

PROBE_TIMEOUT = 30.0


# ---- the steps ---------------------------------------------------------------------------------------


def _probe_command(candidates: list[str], rt_rel: str, env_rel: str) -> str:
    # skyhive's directory on the node (runtime, environments, sockets, logs) is private, like the client's:
    # it and the directories in it 0700 (made so again where an older bootstrap left them open)
    dirs = " ".join(f'"$HOME/.skyhive/{d}"' for d in ("", "rt", "envs", "run"))
    lines = [f'(umask 077 && mkdir -p {dirs}) && chmod 700 {dirs}',
             'echo "home=$HOME"', 'echo "uid=$(id -u)"']
    check = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
    for c in candidates:
        q = shlex.quote(c)
        lines.append(f'p=$(command -v {q} 2>/dev/null) && v=$("$p" -c {shlex.quote(check)} 2>/dev/null) '
                     f'&& echo "py={c}|$p|$v" || echo "nopy={c}"')
    lines.append(f'[ -f "$HOME/{rt_rel}/.ready" ] && echo rt=ready')
    lines.append(f'[ -f "$HOME/{env_rel}/.ready" ] && echo env=ready')
    lines.append('command -v uv >/dev/null 2>&1 && echo "uv=$(command -v uv)"')
    lines.append("command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | sed 's/^/gpu=/'")
    return "; ".join(lines) + "; true"


def _parse(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out.setdefault(key.strip(), []).append(value.strip())
    return out


async def _script(shell: Shell, spec: dict[str, Any], *, python: str, env: dict[str, str],
                  on_step: Any, timeout: float, redact: Any, limit: str = "Settings.start_timeout") -> tuple[bool, str]:
    """Run the node-side script; (cached, output). Raises `SetupFailed` with its error and output, or
    naming the step (and pip's package) it was at when it ran past `timeout` (the setting `limit`)."""
    out = ScriptOutput(on_step, where=shell.label)
    command = f"exec {shlex.quote(python)} -c {shlex.quote(SCRIPT)} {shlex.quote(json.dumps(spec))}"
    try:
        result = await shell.run(command, env=env, timeout=timeout,
                                 on_line=lambda _, line: out.feed(redact(line)), lifeline=True)
    except TimeoutError:  # the command is ended: the script's lifeline removes what it was building
        tail = "\n".join(out.lines[-30:])
        raise SetupFailed(f"{shell.where}: bootstrap took longer than {timeout:g} s ({limit}) and was "
                          f"stopped at step {out.at}; nothing half-built is kept. Last output:\n{tail}",
                          host=shell.host) from None
    if result.exit_status != 0:
        raise SetupFailed(f"{shell.where}: bootstrap failed at {out.failure(result.exit_status)}",
                          host=shell.host)
    return out.cached, "\n".join(out.lines)


def _choose_python(shell: Shell, facts: dict[str, list[str]], want: str, explicit: str | None) -> str | None:
    where, host = shell.where, shell.host
    found = []
    for entry in facts.get("py", []):
        name, path, version = (entry.split("|") + ["", ""])[:3]
        found.append(f"{name} = {version} ({path})")
        if ".".join(version.split(".")[:2]) == want:
            return path
        if explicit:
            raise PythonMismatch(
                f"{where}: python={explicit!r} is Python {version}, but the client runs Python "
                f"{'.'.join(map(str, sys.version_info[:3]))}; functions travel as bytecode, so the node needs "
                f"Python {want}. Point {shell.python_option} at a Python {want} there.", host=host)
    return None


async def prepare_remote(ctx: NodeContext, node: int, shell: Shell) -> Prepared:
    """Prepare node `node` over `shell` (see the module docstring): the detail for its `ready` event
    ("cached" or what was built) and its workers' `NodeEnv`. Raises `ProvisionError` subclasses naming
    the node and its host."""

    def step(text: str) -> None:  # logged, and shown by the pool's provisioning display
        log.info("node %d (%s): %s", node, shell.label, text)
        ctx.log.emit(NodeProgress, node=node, detail=text)

    started = time.monotonic()
    outcome = "failed"
    try:
        prepared = await _bootstrap(ctx, node, shell, step)
        outcome = prepared.detail
        return prepared
    except ProvisionError as exc:
        if exc.node is None:
            exc.node = node
        if exc.host is None:
            exc.host = shell.host
        outcome = f"failed: {str(exc).splitlines()[0]}"
        raise
    finally:
        log.info("node %d (%s): %s (%.2f s)", node, shell.label, outcome, time.monotonic() - started)


async def _start_watchdog(shell: Shell, *, python: str, rt_dir: str, state_dir: str) -> None:
    """Start the node's idle watchdog (`runtime/worker/watchdog.py`), detached; one per node."""
    command = (f"PYTHONPATH={shlex.quote(rt_dir)} {shlex.quote(python)} -m skyhive.runtime.worker.watchdog "
               f"--idle {shell.idle_shutdown:g} --command {shlex.quote(shell.shutdown_command)} "
               f"--state-dir {shlex.quote(state_dir)}")
    result = await shell.run(command, timeout=PROBE_TIMEOUT)
    if result.exit_status != 0:
        raise BootstrapError(f"{shell.where}: the idle watchdog did not start (exit {result.exit_status}): "
                             f"{(result.stderr or result.stdout).strip()[-2000:]}", host=shell.host)


async def _lift_boot_limit(shell: Shell) -> None:
    """Lift the boot-time limit the node's boot script set (`Shell.boot_limit_off`); a node whose limit stays
    would shut itself down under a running pool, so failing to lift it fails bootstrap."""
    result = await shell.run(shell.boot_limit_off, timeout=PROBE_TIMEOUT)
    if result.exit_status != 0:
        raise BootstrapError(f"{shell.where}: its boot-time limit could not be lifted (exit {result.exit_status}, "
                             f"{shell.boot_limit_off!r}): {(result.stderr or result.stdout).strip()[-2000:]}",
                             host=shell.host)


async def _put_all(shell: Shell, paths: list[str], directory: str) -> None:
    """Put local files and directories into `directory` on the node, each under its own name."""
    for path in paths:
        await shell.put(path, f"{directory}/{Path(path).name}")


async def _bootstrap(ctx: NodeContext, node: int, shell: Shell, step: Callable[[str], None]) -> Prepared:
    where, host = shell.where, shell.host
    image = ctx.image
    timeout = ctx.settings.start_timeout
    redact = ctx.log.redact
    if image is not None:
        shell.keep_secret(image.secret_values())
    want = "%d.%d" % sys.version_info[:2]
    if image is not None and image.python and ".".join(image.python.split(".")[:2]) != want:
        raise PythonMismatch(
            f"host {where}: Image(python={image.python!r}) differs from the client's Python "
            f"{'.'.join(map(str, sys.version_info[:3]))}; functions travel as bytecode, so client and nodes "
            f"need the same major.minor", host=host)
    step("connecting")
    wheels = await anyio.to_thread.run_sync(runtime_wheels)
    explicit = shell.python
    key = env_key(image, want, explicit)
    rt_rel = f".skyhive/rt/{wheels.digest[:16]}"
    env_rel = f".skyhive/envs/{key}"
    candidates = [explicit] if explicit else [f"python{want}", "python3"]
    if shell.ready_command:  # a fresh cloud machine finishing its first boot (cloud-init)
        step("waiting for the node's first-boot setup")
        ready = await shell.run(shell.ready_command, timeout=timeout)
        if ready.exit_status != 0:  # e.g. a GPU node whose driver does not answer (providers/cloud/boot.py)
            raise BootstrapError(f"{where}: the node is not ready (exit {ready.exit_status}): "
                                 f"{(ready.stderr or ready.stdout).strip()[-2000:]}", host=host)
    step("probing")
    probe = await shell.run(_probe_command(candidates, rt_rel, env_rel), timeout=PROBE_TIMEOUT)
    facts = _parse(probe.stdout)
    home = (facts.get("home") or [""])[0]
    if not home:
        raise BootstrapError(f"{where}: the probe command failed: {(probe.stderr or probe.stdout).strip()}",
                             host=host)
    warn_missing(ctx.spec.accelerator, devices_from_smi(facts.get("gpu", [])), where=where)
    python = _choose_python(shell, facts, want, explicit)
    if python is None and facts.get("uv"):
        step(f"installing Python {want} with uv")
        uv = facts["uv"][0]
        res = await shell.run(f"{shlex.quote(uv)} python install {want} >&2 && {shlex.quote(uv)} python find {want}",
                                  timeout=timeout)
        if res.exit_status == 0 and res.stdout.strip():
            python = res.stdout.strip().splitlines()[-1]
    if python is None:
        seen = "; ".join(f"{c}: not found" for c in facts.get("nopy", [])) or "none"
        versions = "; ".join(f"{e.split('|')[0]} is {e.split('|')[2]}" for e in facts.get("py", []))
        raise PythonMismatch(
            f"{where}: no Python {want} found ({'; '.join(x for x in (versions, seen) if x)}); the client runs "
            f"Python {'.'.join(map(str, sys.version_info[:3]))} and functions travel as bytecode, so the node needs "
            f"Python {want}. Install python{want} there (or uv), or point {shell.python_option} at one.",
            host=host)
    rt_dir, env_dir = f"{home}/{rt_rel}", f"{home}/{env_rel}"
    cached_rt = "ready" in facts.get("rt", [])
    cached_env = "ready" in facts.get("env", [])
    token = _secrets.token_hex(4)
    if not cached_rt:
        step("uploading skyhive runtime")
        incoming = f"{home}/.skyhive/rt/incoming-{token}"
        await _put_all(shell, [str(p) for p in wheels.paths], incoming)
        await _script(shell, {"action": "runtime", "dir": rt_dir, "src": incoming}, python=python, env={},
                      on_step=lambda s: step(f"runtime: {s}"), timeout=timeout, redact=redact)
    built = 0.0
    if not cached_env:
        t0 = time.monotonic()
        incoming = ""
        if image is not None and image.includes:
            step("uploading includes")
            incoming = f"{env_dir}.incoming-{token}"
            await _put_all(shell, [os.path.expanduser(p) for p in image.includes], incoming)
        spec = {
            "action": "env", "dir": env_dir, "incoming": incoming, "python": python,
            "pip": list(image.pip) if image is not None else [],
            "pip_indexes": list(image.pip_indexes) if image is not None else [],
            "find_links": list(image.find_links) if image is not None else [],
            "apt": list(image.apt) if image is not None else [],
            "setup": list(image.setup) if image is not None else [],
        }
        env = image.all_env() if image is not None else {}
        step("building environment")
        with ctx.building():  # bounded by build_timeout, not by the pool's start_timeout
            cached_env, _ = await _script(shell, spec, python=python, env=env,
                                          on_step=lambda s: step(f"environment: {s}"),
                                          timeout=ctx.settings.build_timeout, redact=redact,
                                          limit="Settings.build_timeout")
        built = time.monotonic() - t0
    has_venv = image is not None and bool(image.pip)
    has_files = image is not None and bool(image.includes)
    node_env = NodeEnv(
        python=f"{env_dir}/venv/bin/python" if has_venv else python,
        home=home,
        pythonpath=(rt_dir, *((f"{env_dir}/files",) if has_files else ())),
        cwd=f"{env_dir}/files" if has_files else home,
        run_dir=f"{home}/.skyhive/run",
        env_dir=env_dir,
    )
    if shell.idle_shutdown > 0:
        step("starting the idle watchdog")
        await _start_watchdog(shell, python=python, rt_dir=rt_dir, state_dir=f"{home}/.skyhive/watchdog")
    if shell.boot_limit_off:  # the node's watchdog (or the client that keeps it) has taken over
        step("lifting the boot-time limit")
        await _lift_boot_limit(shell)
    if cached_env:
        return Prepared(f"env {key} cached (runtime {'cached' if cached_rt else 'shipped'})", node_env)
    return Prepared(f"env {key} built in {built:.1f} s (runtime {'cached' if cached_rt else 'shipped'})", node_env)
