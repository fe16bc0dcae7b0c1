"""FakeServiceQuotas: a FAKE of AWS Service Quotas' GetServiceQuota for EC2's vCPU quotas, on 127.0.0.1.

Why a fake: moto (5.x) serves ``service-quotas`` for the service code ``vpc`` only; for ``ec2`` it answers
every quota with NoSuchResourceException (moto/servicequotas/models.py), so the EC2 vCPU quotas skyhive
reads cannot come from it. This server answers only what the Service Quotas API reference says, and
refuses what it refuses, rule by rule (API reference 2019-06-24, GetServiceQuota; AWS JSON 1.1 protocol;
AWS Common Errors):

- the operation comes in ``X-Amz-Target: ServiceQuotasV20190624.<Operation>`` on ``POST /`` with
  ``Content-Type: application/x-amz-json-1.1``; any other operation -> ``UnknownOperationException`` 400;
- a request without a SigV4 ``Authorization`` header -> ``MissingAuthenticationTokenException`` 403; one
  signed for another service than ``servicequotas`` (its credential scope) -> ``InvalidSignatureException``
  403;
- ``ServiceCode`` must match ``[a-zA-Z][a-zA-Z0-9-]{1,63}`` and ``QuotaCode`` ``[a-zA-Z][a-zA-Z0-9-]{1,128}``,
  both required -> else ``IllegalArgumentException`` 400 ("Invalid input was provided");
- a service or quota code it does not hold -> ``NoSuchResourceException`` 400;
- ``deny = True`` (an IAM policy without ``servicequotas:GetServiceQuota``) -> ``AccessDeniedException`` 400.

The answer is ``{"Quota": {...}}`` with the ServiceQuota fields skyhive may read (ServiceCode, ServiceName,
QuotaArn, QuotaCode, QuotaName, Value, Unit, Adjustable, GlobalQuota). Quota names are those AWS
lists for EC2 (Service Quotas console, "Amazon Elastic Compute Cloud (Amazon EC2)"), written out here
independently of skyhive's own table so that a wrong code in either shows.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler

from .loopback_http import LoopbackHTTPServer

__all__ = ["FakeServiceQuotas", "EC2_VCPU_QUOTA_NAMES"]

EC2_VCPU_QUOTA_NAMES = {
    "L-417A185B": "Running On-Demand P instances",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-7212CCBC": "All P Spot Instance Requests",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
}
_SERVICE = re.compile(r"[a-zA-Z][a-zA-Z0-9-]{1,63}")
_QUOTA = re.compile(r"[a-zA-Z][a-zA-Z0-9-]{1,128}")
_TARGET = "ServiceQuotasV20190624."


class FakeServiceQuotas(LoopbackHTTPServer):
    """A FAKE Service Quotas endpoint holding EC2 quota values: `values` maps quota code -> vCPUs (only the
    codes given exist). `endpoint` is ``http://127.0.0.1:PORT``; `asked` lists (region, quota code) of
    every GetServiceQuota answered. Use as a context manager."""

    def __init__(self, values: dict[str, float], *, account: str = "123456789012") -> None:
        unknown = set(values) - set(EC2_VCPU_QUOTA_NAMES)
        if unknown:
            raise ValueError(f"FakeServiceQuotas knows the names of {sorted(EC2_VCPU_QUOTA_NAMES)}, not {sorted(unknown)}")
        self.values = dict(values)
        self.account = account
        self.deny = False
        self.asked: list[tuple[str, str]] = []
        super().__init__("fake-service-quotas")

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict]:
        """(HTTP status, JSON body) for one POST."""
        low = {k.lower(): v for k, v in headers.items()}
        target = low.get("x-amz-target", "")
        if path != "/" or not target.startswith(_TARGET) or target[len(_TARGET):] != "GetServiceQuota":
            return 400, _error("UnknownOperationException", f"operation {target or path!r} is not served")
        auth = low.get("authorization", "")
        scope = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request", auth)
        if scope is None:
            return 403, _error("MissingAuthenticationTokenException", "Missing Authentication Token")
        region, service = scope.groups()
        if service != "servicequotas":
            return 403, _error("InvalidSignatureException", f"Credential should be scoped to correct service: "
                                                            f"'servicequotas', not {service!r}")
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return 400, _error("SerializationException", "request body is not JSON")
        service_code, quota_code = request.get("ServiceCode"), request.get("QuotaCode")
        if not isinstance(service_code, str) or not _SERVICE.fullmatch(service_code) \
                or not isinstance(quota_code, str) or not _QUOTA.fullmatch(quota_code):
            return 400, _error("IllegalArgumentException", "Invalid input was provided.")
        if self.deny:
            return 400, _error("AccessDeniedException", "You do not have sufficient permission to perform this action.")
        if service_code != "ec2" or quota_code not in self.values:
            return 400, _error("NoSuchResourceException", "The request failed because the specified quota does not exist.")
        self.asked.append((region, quota_code))
        return 200, {"Quota": {
            "ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{region}:{self.account}:ec2/{quota_code}", "QuotaCode": quota_code,
            "QuotaName": EC2_VCPU_QUOTA_NAMES[quota_code], "Value": float(self.values[quota_code]), "Unit": "None",
            "Adjustable": True, "GlobalQuota": False}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, payload = fake.answer(self.path, dict(self.headers), self.rfile.read(length) if length else b"")
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                status, payload = 400, _error("UnknownOperationException", "GET is not served")
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _error(code: str, message: str) -> dict:
    """An AWS JSON 1.1 error body (``__type`` names the error)."""
    return {"__type": code, "message": message}
