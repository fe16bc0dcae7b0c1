"""Opt-in against the real GCP, Azure and DigitalOcean: one small node each booted to `ready`, one call run on
it, destroyed, nothing left by tag (`real_smoke.smoke_pool`). Each test runs only when that cloud's
credentials are present AND ``SKYHIVE_REAL_CLOUDS`` names it (e.g. ``SKYHIVE_REAL_CLOUDS=gcp,azure``):
credentials alone never spend money. CI has neither; here they are skipped, the reason naming what to set.
"""

from __future__ import annotations

import os

import anyio

from tests.cloud.real_smoke import opt_in, smoke_pool


@opt_in("gcp", "GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`, GOOGLE_CLOUD_PROJECT")
def test_gcp_one_node_boots_to_ready_runs_a_call_and_is_destroyed():
    from skyhive.providers.cloud.gcp import GCP

    anyio.run(smoke_pool, GCP(region=os.environ.get("SKYHIVE_GCP_REGION", "us-central1")))


@opt_in("azure", "AZURE_TENANT_ID, AZURE_SUBSCRIPTION_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET (or `az login`)")
def test_azure_one_node_boots_to_ready_runs_a_call_and_is_destroyed():
    from skyhive.providers.cloud.azure import Azure

    anyio.run(smoke_pool, Azure(region=os.environ.get("SKYHIVE_AZURE_REGION", "eastus")))


@opt_in("digitalocean", "DIGITALOCEAN_ACCESS_TOKEN")
def test_digitalocean_one_node_boots_to_ready_runs_a_call_and_is_destroyed():
    from skyhive.providers.cloud.digitalocean import DigitalOcean

    anyio.run(smoke_pool, DigitalOcean(region=os.environ.get("SKYHIVE_DO_REGION", "nyc3")))
