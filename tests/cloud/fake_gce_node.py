"""What a GCE node's own shell reaches, on 127.0.0.1: one VM's metadata server (FakeGCE rule G18) and the
Compute API of a `FakeGCE` (its rules G9, G19, G20 and the rest), over real HTTP, so that the node's
self-end script (`providers/cloud/gcp_end.py`) runs for real under ``sh`` with ``curl``.

`GCENode(fake, zone, name)` is the node (instance `name` in `zone`): ``/computeMetadata/v1/...`` is that VM's
metadata server (the real one knows its VM by where the request comes from; this one is bound to one),
``/compute/v1/...`` is the Compute API. `env` is what points the script at it (``SKYHIVE_GCE_METADATA``,
``SKYHIVE_GCE_API``); `seen` lists each request's method and path.
"""

from __future__ import annotations

import json
from typing import Any

from tests.cloud.fake_gce import COMPUTE, FakeGCE
from tests.infra.loopback_http import FakeService

__all__ = ["GCENode", "metadata"]

_METADATA = "/computeMetadata/v1/"


def metadata(fake: FakeGCE, zone: str, name: str, method: str, path: str, headers: Any) -> tuple[int, str]:
    """G18: what the metadata server of instance (`zone`, `name`) answers to `path` (under
    ``/computeMetadata/v1/``)."""
    if headers.get("Metadata-Flavor") != "Google":
        return 403, 'Missing required header "Metadata-Flavor": "Google"\n'
    if method != "GET":
        return 405, ""
    instance = fake.instances.get((zone, name))
    if instance is None:
        return 404, ""  # a deleted VM answers nothing
    accounts = instance.get("serviceAccounts") or []
    match path:
        case "project/project-id":
            return 200, fake.project
        case "project/numeric-project-id":
            return 200, fake.number
        case "instance/name":
            return 200, name
        case "instance/zone":
            return 200, f"projects/{fake.number}/zones/{zone}"
        case "instance/service-accounts/default/token" if accounts:
            token = f"ya29.c.fake-node-{len(fake.node_tokens) + 1}-{zone}-{name}"
            fake.node_tokens[token] = (accounts[0]["email"], list(accounts[0].get("scopes") or []))
            return 200, json.dumps({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
        case "instance/service-accounts/default/scopes" if accounts:
            return 200, "".join(f"{s}\n" for s in accounts[0].get("scopes") or [])
        case "instance/service-accounts/default/email" if accounts:
            return 200, accounts[0]["email"]
    return 404, ""


class GCENode(FakeService):
    """FAKE: instance (`zone`, `name`) of `fake` as its own shell reaches GCE (see the module docstring)."""

    def __init__(self, fake: FakeGCE, zone: str, name: str) -> None:
        self.fake, self.zone, self.name = fake, zone, name
        self.seen: list[str] = []
        super().__init__(f"fake-gce-node-{name}")

    @property
    def env(self) -> dict[str, str]:
        return {"SKYHIVE_GCE_METADATA": self.endpoint, "SKYHIVE_GCE_API": self.endpoint}

    def respond(self, method: str, path: str, headers: Any, body: bytes | None) -> tuple[int, Any, dict[str, str]]:
        self.seen.append(f"{method} {path}")
        if path.startswith(_METADATA):
            status, text = metadata(self.fake, self.zone, self.name, method, path.removeprefix(_METADATA), headers)
            return status, text, {"Metadata-Flavor": "Google"}
        status, payload = self.fake.answer(method, COMPUTE.removesuffix("/compute/v1") + path, headers, body)
        return status, payload, {}
