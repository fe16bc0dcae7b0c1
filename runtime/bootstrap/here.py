"""Bootstrap a node that shares this machine's Python and files (`Shell.same_machine`: Local, Slurm over a
shared file system): its workers use this interpreter, so check the image can run here — every package
installed, at a version the image allows (a pin is honoured or refused, never ignored) — or, where the
shell allows it (`Shell.build_env`), build the Image's environment here with the node-side script the
remote bootstrap runs, once per content hash."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import SetupFailed
from ...providers.base import ProvisionError
from ...paths import private_dir
from ..events.types import NodeProgress
from ..nodes.shell import NodeEnv, Prepared, Shell
from .envkey import SCRIPT, env_key
from .output import ScriptOutput

if TYPE_CHECKING:
    from ...plugins.image import Image
    from ..nodes.context import NodeContext

log = logging.getLogger(__name__)

__all__ = ["prepare_here", "check_local_image", "image_problems", "build_local_env", "import_name"]

# distributions whose import name differs from the project name
_IMPORT_NAMES = {
    "scikit-learn": "sklearn", "pillow": "PIL", "pyyaml": "yaml", "opencv-python": "cv2",
    "beautifulsoup4": "bs4", "protobuf": "google.protobuf", "jax[cpu]": "jax", "dask[distributed]": "distributed",
}


def import_name(requirement: str) -> str:
    """The module a pip requirement provides, by convention (`torch==2.3` -> `torch`)."""
    name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0].lower()
    return _IMPORT_NAMES.get(name, name.replace("-", "_"))


def check_local_image(image: Image | None, *, node: int) -> None:
    """Local workers run this Python: every pip package of the image must be installed here, at a
    version the image allows (`torch==2.3.0` with torch 2.13 installed is refused, never run).

    Raises `ProvisionError` naming each package that is missing or at another version, with the
    version found here.
    """
    if image is None:
        return
    _check_python(image, node=node)
    problems = image_problems(image)
    if problems:
        raise ProvisionError(
            f"node {node}: the Local provider runs workers with this machine's Python ({sys.executable}), "
            f"which does not satisfy the pool's Image/plugins: {'; '.join(problems)}. Install them here "
            f"(pip install {' '.join(repr(p.split(' ')[0]) for p in problems)}), drop the pins, let Local "
            "build the Image's environment (what sky.Local() does unless built with build_env=False), "
            "or use SSH or a cloud.",
            node=node,
        )


def _problem(req: str) -> str | None:
    """Why `req` is not satisfied by this Python, or None when it is."""
    from importlib import metadata  # (here, not at the top: a pool without an Image never needs them)

    from packaging.requirements import InvalidRequirement, Requirement

    try:
        parsed = Requirement(req)
    except InvalidRequirement:
        parsed = None
    if parsed is not None and parsed.marker is not None and not parsed.marker.evaluate():
        return None  # not meant for this platform
    if parsed is None or parsed.url:
        found = importlib.util.find_spec(import_name(req).split(".")[0]) is not None
        return None if found else f"{req} (not installed)"
    try:
        have = metadata.version(parsed.name)
    except metadata.PackageNotFoundError:
        if importlib.util.find_spec(import_name(req).split(".")[0]) is not None and not parsed.specifier:
            return None  # importable though not installed as a distribution (e.g. on sys.path)
        return f"{req} (not installed)"
    if parsed.specifier and not parsed.specifier.contains(have, prereleases=True):
        return f"{req} (this Python has {parsed.name} {have})"
    return None


async def prepare_here(ctx: NodeContext, node: int, shell: Shell) -> Prepared:
    """Bootstrap a node that shares this machine's Python: this Python when it satisfies the Image (the
    fast path, no detail, the transport's defaults stand); else, where `shell.build_env` allows it, the
    Image's environment built once (cached by content hash; `Local(build_env=False)` turns it off); else
    `ProvisionError` naming what differs."""
    if not shell.build_env or not image_problems(ctx.image):
        check_local_image(ctx.image, node=node)
        return Prepared()
    assert ctx.image is not None
    _check_python(ctx.image, node=node)

    def on_step(text: str) -> None:
        log.info("node %d: building the Image's environment: %s", node, text)
        ctx.log.emit(NodeProgress, node=node, detail=f"building environment: {text}")
        if ctx.step_lines:  # no display draws the step (a script's log): one line per step, no spinner
            print(f"skyhive: pool {ctx.pool_id} node {node}: building the Image's environment: {text}",
                  file=sys.stderr, flush=True)

    try:
        with ctx.building():  # bounded by build_timeout, not by the pool's start_timeout
            return await build_local_env(ctx.image, node=node, timeout=ctx.settings.build_timeout,
                                         on_step=on_step, cwd=shell.cwd, redact=ctx.log.redact)
    except SetupFailed as exc:  # say why there was a build at all: what this Python lacks
        raise SetupFailed(f"{exc}\n(Local builds an environment for this pool because this Python does not "
                          f"satisfy its Image: {'; '.join(image_problems(ctx.image))}; Local(build_env=False) "
                          f"refuses such a pool instead)", node=node) from None


def _check_python(image: Any, *, node: int) -> None:
    want = "%d.%d" % sys.version_info[:2]
    if image.python and ".".join(image.python.split(".")[:2]) != want:
        raise ProvisionError(
            f"node {node}: Image(python={image.python!r}) differs from this Python {want}, which Local "
            "workers run (functions travel as bytecode: client and workers need the same major.minor)",
            node=node)


def image_problems(image: Any) -> list[str]:
    """What of `image` this Python, as it is, does not satisfy (empty: the fast path): packages
    missing or at other versions, and the steps only a built environment runs (apt, setup, includes)."""
    if image is None:
        return []
    problems = [p for p in (_problem(req) for req in image.pip) if p is not None]
    if image.apt:
        problems.append(f"Image.apt {', '.join(image.apt)} (not installed by Local)")
    if image.setup:
        problems.append(f"Image.setup ({len(image.setup)} command(s), not run by Local)")
    if image.includes:
        problems.append(f"Image.includes {', '.join(map(str, image.includes))} (not copied by Local)")
    return problems


async def build_local_env(image: Any, *, node: int, timeout: float, on_step: Callable[[str], None] | None = None,
                          cwd: str | None = None, redact: Callable[[str], str] | None = None) -> Prepared:
    """Build `image`'s environment under the state directory with the node-side bootstrap script (the
    one remote nodes run), once per content hash; the `NodeEnv` that points workers at it. `on_step`
    hears each step as it starts ("venv", "pip", "setup 1/2"); `timeout` bounds each run of the script;
    `cwd` is the workers' directory (on their path after the Image's files)."""
    on_step = on_step or (lambda text: None)
    redact = redact or (lambda text: text)

    want = "%d.%d" % sys.version_info[:2]
    # state_dir()/local-envs/{rt,envs}, each 0700 (created so before the script puts anything there)
    rt_root, env_root = private_dir("local-envs", "rt"), private_dir("local-envs", "envs")
    from .wheels import runtime_wheels

    wheels = await anyio.to_thread.run_sync(runtime_wheels)
    rt_dir = rt_root / wheels.digest[:16]
    env_dir = env_root / env_key(image, want, sys.executable)
    if not (rt_dir / ".ready").exists():
        src = Path(tempfile.mkdtemp(prefix="incoming-", dir=rt_root))
        for path in wheels.paths:  # the script consumes (removes) its source directory
            shutil.copy(path, src / path.name)
        await _run_script(redact, {"action": "runtime", "dir": str(rt_dir), "src": str(src)}, {},
                          node=node, timeout=timeout, on_step=lambda text: on_step(f"runtime: {text}"))
    incoming = ""
    if image.includes and not (env_dir / ".ready").exists():
        incoming = tempfile.mkdtemp(prefix="incoming-", dir=env_root)
        for raw in image.includes:
            item = Path(raw).expanduser()
            copy = shutil.copytree if item.is_dir() else shutil.copy
            copy(item, Path(incoming) / item.name)
    spec = {"action": "env", "dir": str(env_dir), "incoming": incoming, "python": sys.executable,
            "pip": list(image.pip), "pip_indexes": list(image.pip_indexes),
            "find_links": list(image.find_links), "apt": list(image.apt), "setup": list(image.setup)}
    cached = await _run_script(redact, spec, image.all_env(), node=node, timeout=timeout, on_step=on_step)
    # the runtime first; then the Image's files and the working directory (where the user's own
    # modules are), which `python -P` no longer puts in front
    paths = (str(rt_dir), *([str(env_dir / "files")] if image.includes else []), cwd or os.getcwd())
    env = NodeEnv(python=str(env_dir / "venv" / "bin" / "python") if image.pip else sys.executable,
                  pythonpath=paths, env_dir=str(env_dir))
    return Prepared(f"local env {env_dir.name} {'cached' if cached else 'built'}", env)


async def _run_script(redact: Callable[[str], str], spec: dict[str, Any], env: Mapping[str, str], *,
                      node: int, timeout: float, on_step: Callable[[str], None]) -> bool:
    """Run the bootstrap script here, its steps reported as they start; True when its directory was
    already complete (cached). Raises `SetupFailed` naming the step that failed or ran out of time."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SCRIPT, json.dumps(spec), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, **env},
        start_new_session=True)  # stdin stays open: the lifeline (the script cleans up when it closes)
    assert proc.stdout is not None
    out = ScriptOutput(on_step, where=f"node {node}")

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            out.feed(redact(raw.decode(errors="replace").rstrip("\n")))
        await proc.wait()

    try:
        with anyio.fail_after(timeout):
            await read()
    except TimeoutError:
        with anyio.CancelScope(shield=True):  # (asyncio.shield would not hold under anyio's cancellation)
            await _stop(proc)
        tail = "\n".join(out.lines[-30:])
        raise SetupFailed(f"node {node}: building the Image's environment here took longer than {timeout:g} s "
                          f"(Settings.build_timeout) and was stopped at step {out.at}; nothing half-built "
                          f"is kept. Last output:\n{tail}", node=node) from None
    except BaseException:
        with anyio.CancelScope(shield=True):  # (asyncio.shield would not hold under anyio's cancellation)
            await _stop(proc)
        raise
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the script has exited: its lifeline is no longer needed
    if proc.returncode != 0:
        raise SetupFailed(f"node {node}: building the Image's environment here failed: "
                          f"{out.failure(proc.returncode)}", node=node)
    return out.cached


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Stop the script the way a lost client does: close its stdin (its lifeline kills the running
    command and removes what it was building), then, if it has not exited in 5 s, SIGKILL its group."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
