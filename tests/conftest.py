"""Shared fixtures: every test gets its own skyhive state directory; async tests run on asyncio."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.infra.fixtures", "tests.infra.loopback", "tests.infra.moto_ec2"]


@pytest.fixture(autouse=True)
def _skyhive_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    home = str(tmp_path_factory.mktemp("skyhive-home"))
    monkeypatch.setenv("SKYHIVE_HOME", home)
    return home


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncssh (the SSH transport) runs on asyncio only


@pytest.fixture
def skyhive_home() -> str:
    return os.environ["SKYHIVE_HOME"]
