"""The public API: names pinned, decorator sugar, the blocking pool, the demo example."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import skyhive as sky

ROOT = Path(__file__).resolve().parent.parent

ERRORS = {
    "SkyhiveError", "ProtocolError", "ProvisionError", "NodeUnreachable", "SSHError", "HostUnreachable",
    "HostKeyChanged", "AuthenticationFailed", "BootstrapError", "PythonMismatch", "SetupFailed",
    "SlurmError", "SlurmUnreachable",
    "ProviderNotAvailable", "CloudAPIError", "WorkerLost", "TaskTimeout", "RemoteError", "SerializationError", "PoolClosed",
    "OutputStalled", "EventsStalled", "NotOnNodeError", "TaskFileError", "LaunchError", "PoolNotFound", "PoolInUse",
    "PoolExists", "PoolGone", "TeardownIncomplete",
    "WorkerRestarted", "CoordinatorPortInUse", "KerasBackendMismatch", "HuggingFaceLoginError",
    "StorageError", "NoSSH",
    "ManagedJobError",  # managed jobs (docs/jobs.md)
}
PUBLIC = {
    "Pool", "Local", "SSH", "Slurm", "Simulated", "Kubernetes", "AWS", "GCP", "DigitalOcean", "Azure", "Image", "compute", "gather", "instance_info", "InstanceInfo", "Peer", "shard",
    "stdout", "stderr", "silent", "OutputRecord", "Captured", "plugins", *ERRORS,
    "Bucket", "checkpoint_dir",  # bucket mounts (docs/storage.md)
    # the seeds' spellings (docs/seeds.md)
    "ComputePool", "Compute", "function", "accelerators", "integrations", "PipIndex", "AcceleratorWarning", "Worker",
    "jobs",  # managed jobs (docs/jobs.md)
    "Spec", "PendingCompute", "PendingFunction", "sky", "main",
    "Options",  # Skyward's sky.Options (docs/seeds.md)
    "preload",  # the runtime imported ahead of the first pool (docs/startup.md)
    "dict", "set", "counter", "queue", "barrier", "lock",  # Skyward's distributed collections
}


def test_public_names_are_pinned():
    assert set(sky.__all__) == PUBLIC
    for name in sorted(PUBLIC - {"SSH"}):  # SSH arrives with the SSH provider
        assert getattr(sky, name) is not None, name
    for err in sorted(ERRORS):
        assert issubclass(getattr(sky, err), sky.SkyhiveError), err
    with pytest.raises(AttributeError):
        sky.NoSuchThing  # noqa: B018


def test_every_exception_class_of_skyhive_is_public_and_a_skyhive_error():
    """One tree: every exception class the package defines (but the internal ones below) is a
    `SkyhiveError` exported from `skyhive`, and all of them are defined in skyhive/errors.py or
    protocol/errors.py."""
    import ast

    # control flow that never reaches a caller, the protocol's two sides (caught as ProtocolError), and
    # the lifecycle table's "this is a skyhive bug", the storage wire's unreadable answer (always caught:
    # botocore fetches that object instead, runtime/storage/direct.py)
    internal = {"TaskCancelled", "WorkerGone", "LocalProtocolError", "RemoteProtocolError", "IllegalTransition",
                "WireError"}
    found = {}
    for folder in ("skyhive", "runtime", "protocol", "providers", "plugins"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                        isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in ERRORS)
                        for b in node.bases):
                    found[node.name] = path.relative_to(ROOT).as_posix()
    assert set(found) - internal == ERRORS
    assert {p for n, p in found.items() if n not in internal} <= {"skyhive/errors.py", "protocol/errors.py"}


def test_importing_skyhive_on_a_worker_stays_light():
    code = "import sys, skyhive; skyhive.instance_info; skyhive.shard; print('anyio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_package_layout_has_no_stray_top_level_modules():
    import skyhive.protocol
    import skyhive.runtime

    assert skyhive.runtime.__name__ == "skyhive.runtime" and skyhive.protocol.__name__ == "skyhive.protocol"
    assert (Path(sky.__file__).parent / "py.typed").exists()


@sky.compute
def square(x):
    return x * x


@sky.compute
def where():
    return sky.instance_info().node


def test_blocking_pool_and_operators():
    with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        assert where() @ pool == [0, 1]
        assert square(7) >> pool == 49
        assert sky.gather(square(1), square(2), square(3)) >> pool == (1, 4, 9)
        assert pool.broadcast(square, 3) == [9, 9]
        assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
        assert pool.statistics()["tasks_failed"] == 0
        with pytest.raises(ZeroDivisionError):
            pool.run(lambda: 1 / 0)
    assert pool.state.status == "stopped"
    assert square.local(5) == 25 and square(6).local() == 36
    with pytest.raises(TypeError, match="gather"):
        sky.gather(1)


@pytest.mark.anyio
async def test_async_operators_are_awaitable():
    async with sky.Pool(nodes=2) as pool:
        assert await (where() @ pool) == [0, 1]
        assert await (square(4) >> pool) == 16
        assert await (sky.gather(square(2), square(5)) >> pool) == (4, 25)
        assert "Pool" in repr(pool) and "running" in repr(pool)


def test_demo_example_runs():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "[node 0] hello from node 0 of 2" in out.stdout and "[node 1] hello from node 1 of 2" in out.stdout
    assert "node 1 (worker) answered" in out.stdout
    assert "sum of squares = 333283335000" in out.stdout


def test_run_on_anyio_from_a_thread_free_context():
    async def main():
        async with sky.Pool(nodes=1, log_events=False) as pool:
            return await pool.run(square.__skyhive_fn__, 9)

    assert anyio.run(main) == 81


def shout(n):
    for i in range(n):
        print(f"line {i} from node {sky.instance_info().node}")
    return n


def test_blocking_pool_output_iterator():
    import threading

    with sky.Pool(nodes=2, output=None) as pool:
        lines: list[str] = []
        stream = pool.output()

        def consume():
            text = ""
            for record in stream:
                text += record.text
                if text.count("\n") >= 20:
                    break
            lines.extend(text.splitlines())

        reader = threading.Thread(target=consume)
        reader.start()
        assert pool.broadcast(shout, 10) == [10, 10]
        reader.join(timeout=30)
        assert not reader.is_alive()
    assert sorted(lines) == sorted(f"line {i} from node {n}" for n in (0, 1) for i in range(10))
