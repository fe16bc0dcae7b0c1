"""Opt-in against the real GCP, Azure and DigitalOcean: one small node each, created and destroyed, nothing
left. Each test runs only when that cloud's credentials are present AND ``SKYHIVE_REAL_CLOUDS`` names it
(e.g. ``SKYHIVE_REAL_CLOUDS=gcp,azure``): credentials alone never spend money. CI has neither.
They never connect to the node: they check the provider's phases and the listing by tag.
"""

from __future__ import annotations

import os
import uuid

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud.offers import credentials

_ASKED = {c.strip() for c in os.environ.get("SKYHIVE_REAL_CLOUDS", "").split(",") if c.strip()}


def _real(cloud: str, what: str) -> pytest.MarkDecorator:
    found = credentials().get(cloud)
    why = (f"real {cloud} smoke test: set SKYHIVE_REAL_CLOUDS={cloud} and {what} (it creates and destroys one "
           f"small node)" + ("" if found else f"; no {cloud} credentials found"))
    return pytest.mark.skipif(cloud not in _ASKED or not found, reason=why)


def _cycle(provider) -> None:
    pool_id = f"smoke-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        try:
            handles = await provider.create(ClusterSpec(pool_id=pool_id, nodes=1))
            assert handles[0].state == "running" and handles[0].private_addr
            assert [h.provider_id for h in await provider.list_owned(pool_id)] == [handles[0].provider_id]
        finally:
            with anyio.CancelScope(shield=True):
                await provider.down(pool_id)
        assert await provider.list_owned(pool_id) == []

    anyio.run(run)


@_real("gcp", "GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`, GOOGLE_CLOUD_PROJECT")
def test_gcp_one_default_node_is_created_and_destroyed():
    from skyhive.providers.cloud.gcp import GCP

    _cycle(GCP(region=os.environ.get("SKYHIVE_GCP_REGION", "us-central1"), disk_gb=20))


@_real("azure", "AZURE_TENANT_ID, AZURE_SUBSCRIPTION_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET")
def test_azure_one_default_node_is_created_and_destroyed():
    from skyhive.providers.cloud.azure import Azure

    _cycle(Azure(region=os.environ.get("SKYHIVE_AZURE_REGION", "eastus"), disk_gb=30))


@_real("digitalocean", "DIGITALOCEAN_ACCESS_TOKEN")
def test_digitalocean_one_default_node_is_created_and_destroyed():
    from skyhive.providers.cloud.digitalocean import DigitalOcean

    _cycle(DigitalOcean(region=os.environ.get("SKYHIVE_DO_REGION", "nyc3")))
