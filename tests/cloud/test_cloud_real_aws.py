"""Opt-in against the real AWS: one small instance created and destroyed, nothing left.

Runs only when AWS credentials are in the environment (and are not moto's dummies); CI never has them.
It never connects to the instance: it checks the provider's phases and the listing by tag.
"""

from __future__ import annotations

import os
import uuid

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud.aws import AWS

_KEY = os.environ.get("AWS_ACCESS_KEY_ID", "")
pytestmark = pytest.mark.skipif(
    not _KEY or not os.environ.get("AWS_SECRET_ACCESS_KEY") or _KEY == "testing",
    reason="real AWS smoke test: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (it creates and destroys "
           "one t3.micro in AWS_DEFAULT_REGION or us-east-1)",
)


def test_one_small_instance_is_created_and_destroyed():
    aws = AWS(region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), instance_type="t3.micro", disk_gb=8)
    pool_id = f"smoke-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        try:
            handles = await aws.create(ClusterSpec(pool_id=pool_id, nodes=1))
            assert handles[0].state == "running" and handles[0].private_addr
            assert [h.provider_id for h in await aws.list_owned(pool_id)] == [handles[0].provider_id]
        finally:
            with anyio.CancelScope(shield=True):
                await aws.down(pool_id)
        assert await aws.list_owned(pool_id) == []

    anyio.run(run)
