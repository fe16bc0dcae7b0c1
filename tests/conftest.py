"""Shared fixtures: every test gets its own skyhive state directory; async tests run on asyncio."""

from __future__ import annotations

import os
import signal

import pytest

pytest_plugins = ["tests.infra.fixtures", "tests.infra.loopback", "tests.infra.moto_ec2"]


@pytest.fixture(autouse=True)
def _skyhive_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    home = str(tmp_path_factory.mktemp("skyhive-home"))
    monkeypatch.setenv("SKYHIVE_HOME", home)
    return home


# Cloud credentials in the environment of whoever runs the suite. With them a test could reach a real,
# billed cloud by accident (a GPU task naming no provider is ranked across the clouds whose credentials
# are found): every test runs without them, except the opt-in real-cloud smoke tests, which need them.
_CLOUD_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                      "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID",
                      "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "DIGITALOCEAN_ACCESS_TOKEN",
                      "DIGITALOCEAN_NODE_TOKEN")


@pytest.fixture(autouse=True)
def _no_cloud_credentials(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, _skyhive_home: str,
                          tmp_path_factory: pytest.TempPathFactory) -> None:
    module = request.module.__name__.rpartition(".")[2]
    if module.startswith("test_cloud_real"):
        return
    for name in _CLOUD_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    # the logins a cloud's own tools keep (an SSO profile in ~/.aws/config, the Azure CLI's login) count too
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AZURE_CONFIG_DIR", os.path.join(_skyhive_home, "no-azure-cli"))
    if module != "test_kubernetes_real":  # nor the machine's Kubernetes cluster (~/.kube/config, in-cluster)
        monkeypatch.setenv("KUBECONFIG", str(tmp_path_factory.mktemp("no-kube") / "config"))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncssh (the SSH transport) runs on asyncio only


@pytest.fixture
def skyhive_home() -> str:
    return os.environ["SKYHIVE_HOME"]


# ---- the suite in parallel (pytest-xdist, as `dev.py test` runs it) ------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    # an xdist test process ignores SIGINT, and a child inherits an ignored signal: the programs the
    # tests start must get Ctrl-C as a user's do (the Ctrl-C tests send it)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`, a file's tests go to one test process (its module fixtures are made
    once); the slowest files are handed out first, so none of them starts last."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=lambda item: not os.path.basename(item.nodeid.split("::", 1)[0]).startswith(_SLOW_FILES))


#: Files whose tests take minutes together (`dev.py test --durations=50`): started first.
_SLOW_FILES = ("test_slurm", "test_clusters.py", "test_ssh_clusters.py", "test_cloud_clusters_leaking.py",
               "test_storage_ssh.py", "test_local_image.py", "test_cloud_e2e.py", "test_seeds.py",
               "test_cloud_leaking.py", "test_managed_jobs", "test_ssh_errors.py", "test_cli_torch.py",
               "test_dashboard.py", "test_cloud_clusters.py")
