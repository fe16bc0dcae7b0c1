"""Test-only providers: Local nodes that watch a cloud's interruption notice as that cloud's nodes do
(`Provider.interruption_notices`), so a managed job's notice path runs end to end against a FAKE
metadata service (tests/infra/fake_gce_metadata.py, fake_azure_imds.py). Importable by the job's
controller, which unpickles the provider."""

from __future__ import annotations

from skyhive.providers.local import Local


class GCENoticedLocal(Local):
    interruption_notices = "gcp"


class AzureNoticedLocal(Local):
    interruption_notices = "azure"
