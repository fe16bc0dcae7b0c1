"""Opt-in against the real AWS: one small instance booted to `ready`, one call run on it, destroyed, nothing
left — no instance, security group or key pair of the pool (`real_smoke.smoke_pool`, then EC2 read by the pool's
tag and names). Runs only when ``SKYHIVE_REAL_CLOUDS`` names aws AND AWS credentials are found (and are not
moto's dummies): credentials alone never spend money. CI has neither; here it is skipped, the reason naming
what to set.
"""

from __future__ import annotations

import os

import anyio

from skyhive.providers.cloud.aws import AWS
from tests.cloud.real_smoke import GPU, opt_in, smoke_pool

REGION = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


class _Watched(AWS):
    """The real AWS provider, remembering the pools it made (to look for what they left)."""

    def __init__(self, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.pools: list[str] = []

    async def prepare(self, spec):  # type: ignore[no-untyped-def]
        self.pools.append(spec.pool_id)
        await super().prepare(spec)


@opt_in("aws", "AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile; not moto's 'testing')")
def test_one_small_instance_boots_to_ready_runs_a_call_and_is_destroyed():
    import boto3

    assert os.environ.get("AWS_ACCESS_KEY_ID") != "testing", "moto's dummy credentials: not a real AWS account"
    aws = _Watched(region=REGION, instance_type=None if GPU else "t3.micro")
    anyio.run(smoke_pool, aws)
    (pool_id,) = aws.pools
    ec2 = boto3.client("ec2", region_name=REGION)
    live = [i["InstanceId"] for r in ec2.describe_instances(Filters=[{"Name": "tag:skyhive-pool", "Values": [pool_id]}])
            ["Reservations"] for i in r["Instances"] if i["State"]["Name"] not in ("terminated", "shutting-down")]
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [f"skyhive-{pool_id}"]}])
    keys = ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [f"skyhive-{pool_id}"]}])
    assert (live, groups["SecurityGroups"], keys["KeyPairs"]) == ([], [], [])
