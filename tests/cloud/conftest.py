"""tests/cloud: where no ``shared/catalogs`` folder is beside the checkout (a fresh clone), the generator's
tests read the copies in tests/cloud/catalogs (byte-for-byte the shared files, see its README), so they run
instead of being skipped. Set before the test modules are imported: their skip conditions read it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_CATALOGS = Path(__file__).resolve().parents[2].parent / "shared" / "catalogs"
COPIES = Path(__file__).resolve().parent / "catalogs"

if not os.environ.get("SKYHIVE_CATALOGS") and not SHARED_CATALOGS.is_dir():
    os.environ["SKYHIVE_CATALOGS"] = str(COPIES)


@pytest.fixture
def gce(monkeypatch, tmp_path):
    """A FakeGCE behind `requests`, and GOOGLE_APPLICATION_CREDENTIALS naming a service account it trusts (no
    project from the environment, no gcloud configuration of this machine's user)."""
    from tests.cloud.fake_gce import FakeGCE
    from tests.cloud.fake_http import install_fakes

    fake = FakeGCE(project="proj-1")
    install_fakes(monkeypatch, fake)
    key = tmp_path / "sa.json"
    fake.service_account_file(key)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    return fake
