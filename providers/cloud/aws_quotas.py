"""The account's EC2 vCPU quotas, read through Service Quotas (``GetServiceQuota``, service code ``ec2``).

Used by `AWS.check` (``skyhive check``: the P, G and standard families of a region) and by a launch
refused with ``VcpuLimitExceeded`` (the quota's current value beside the vCPUs the pool needs). The
client is botocore's (the `aws` extra), with the same credential chain and profile as EC2. Against an
EC2-compatible `endpoint` (moto) Service Quotas is asked only where ``AWS_ENDPOINT_URL_SERVICE_QUOTAS``
points: such a server has no Service Quotas beside it, and real AWS must not be asked instead.

Service Quotas API reference, GetServiceQuota: request ``{"ServiceCode", "QuotaCode"}`` (patterns
``[a-zA-Z][a-zA-Z0-9-]{1,63}`` and ``{1,128}``); answer ``{"Quota": {"QuotaName", "QuotaCode", "Value",
...}}``; errors AccessDeniedException, NoSuchResourceException, IllegalArgumentException,
ServiceException, TooManyRequestsException. A quota that cannot be read is reported as such, never
guessed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["VcpuQuota", "read_vcpu_quota"]


@dataclass(frozen=True, slots=True)
class VcpuQuota:
    """A quota as Service Quotas states it; `value` None when it could not be read, `why` then says why
    (no endpoint, access denied, no such quota)."""

    code: str  # "L-417A185B"
    region: str
    name: str = ""  # "Running On-Demand P instances"
    value: float | None = None  # vCPUs
    why: str = ""

    def __str__(self) -> str:
        if self.value is None:
            return f"could not be read ({self.why})"
        return f"{self.name} ({self.code}): {self.value:g} vCPUs"


def read_vcpu_quota(code: str, region: str, *, profile: str | None = None, endpoint: str | None = None) -> VcpuQuota:
    """The EC2 quota `code` of `region` as Service Quotas states it now (`value` None and `why` when not).
    `endpoint`: the provider's EC2 endpoint (a test server): Service Quotas is then asked only at
    ``AWS_ENDPOINT_URL_SERVICE_QUOTAS``."""
    if endpoint and not os.environ.get("AWS_ENDPOINT_URL_SERVICE_QUOTAS"):
        return VcpuQuota(code, region, why=f"EC2 endpoint {endpoint} has no Service Quotas (set "
                                           f"AWS_ENDPOINT_URL_SERVICE_QUOTAS)")
    try:
        import botocore.config
        import botocore.session
    except ImportError:
        return VcpuQuota(code, region, why="reading quotas needs botocore, the `aws` extra")
    try:
        session = botocore.session.Session(profile=profile)
        client = session.create_client("service-quotas", region_name=region, config=botocore.config.Config(
            connect_timeout=5, read_timeout=10, retries={"max_attempts": 1}))
        quota = client.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        return VcpuQuota(code=str(quota.get("QuotaCode") or code), region=region,
                         name=str(quota.get("QuotaName") or code), value=float(quota["Value"]))
    except Exception as exc:  # noqa: BLE001 - the quota is extra information: say why it is missing
        return VcpuQuota(code, region, why=f"{type(exc).__name__}: {exc}")
