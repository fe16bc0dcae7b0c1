"""FAKE Google Compute Engine (``compute/v1``) and Google's OAuth token endpoint, in process, under `requests`.

No GCE emulator exists. `FakeGCE` keeps a project's instances, firewalls and operations in memory and
refuses what GCE refuses, rule by rule; each rule names the reference it encodes:

- G1 images: ``sourceImage`` must name an existing image or an image *family* by its ``/family/`` path;
  a family name used as an image name is a 404 (instances.insert, ``initializeParams.sourceImage``:
  https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert; image families:
  https://cloud.google.com/compute/docs/images/image-families-best-practices).
- G2 zones: a zone the region does not have is a 404 (https://cloud.google.com/compute/docs/regions-zones:
  us-east1 has b, c, d; us-central1 a, b, c, f).
- G3 machine types and accelerator types exist per zone (machineTypes/acceleratorTypes are zonal
  resources; https://cloud.google.com/compute/docs/gpus/gpu-regions-zones). Which zone offers which GPU
  machine is taken from ``tests/cloud/catalogs/gcp_gpu.csv`` (a copy of shared/catalogs, rows per zone),
  never from skyhive's own table.
- G4 GPUs cannot live-migrate: an instance with guestAccelerators, or an accelerator-optimized machine
  (A2/A3/A4/G2), needs ``scheduling.onHostMaintenance: TERMINATE`` (default MIGRATE) — 400
  "Instances with guest accelerators do not support live migration"
  (https://cloud.google.com/compute/docs/gpus/create-vm-with-gpus#create-new-gpu-vm-a100).
- G5 guestAccelerators only on N1 machines (the others carry theirs: same page).
- G6 Spot: ``provisioningModel: SPOT`` requires ``automaticRestart: false`` and ``onHostMaintenance:
  TERMINATE`` (https://cloud.google.com/compute/docs/instances/create-use-spot).
- G7 networks: a network that does not exist is a 404; a custom-mode network needs a subnetwork
  (https://cloud.google.com/vpc/docs/vpc#subnet-ranges).
- G8 names: RFC 1035 (``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``); label values lower case; duplicates 409.
- G9 every compute call needs a bearer token the token endpoint issued; the token endpoint checks a
  service account's signed JWT (RFC 7523) or a user's refresh token (RFC 6749 §6).
- G10 boot disk types (issue 38): ``initializeParams.diskType`` defaults to ``pd-standard`` when absent
  (https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert, ``diskType``); each machine
  series takes only the types of `DISK_TYPES` — G2 no pd-standard; A3 Mega/Ultra and A4 Hyperdisk only
  (https://cloud.google.com/compute/docs/accelerator-optimized-machines, "Supported disk types" per
  series) — else 400 ``badRequest`` naming the type.
- G11 consumption models (issue 38): a3-highgpu-1g/2g/4g, A3 Ultra and A4 are not sold on the STANDARD
  model (Spot, Flex-start or reservations only: https://cloud.google.com/compute/docs/accelerator-optimized-machines,
  and https://cloud.google.com/compute/docs/instances/provisioning-models) — else 400 ``badRequest``.
- G12 image families that are deprecated answer 404: the Debian 11 deep-learning families are gone
  (https://cloud.google.com/deep-learning-vm/docs/images lists the current ``common-cu128-ubuntu-2204-nvidia-570``).
- G13 operations take time (issue 38): an insert or delete operation answers RUNNING, and is RUNNING at
  its first poll too; DONE from the second (zoneOperations.get:
  https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get; operation ``status`` is
  PENDING, RUNNING or DONE).
- G14 deletes pass through STOPPING (issue 38): a deleted instance is listed ``STOPPING`` at the next read,
  gone after (https://cloud.google.com/compute/docs/instances/instance-life-cycle).
- G15 rate limits and server errors (issue 38): `insert_faults` maps the n-th ``instances.insert`` call
  (1-based) to (HTTP status, reason, created): 403 ``rateLimitExceeded`` creates nothing; a 5xx
  ``backendError`` with created=True has made the instance although its answer is an error
  (https://cloud.google.com/compute/docs/api/how-tos/api-rate-limits,
  https://cloud.google.com/apis/design/errors). `peak` is the most instances alive at once.
- Injected: `refusals` (a machine type or region -> the message of a 400 ``badRequest`` at insert), for a
  refusal the rules above do not produce.
- Capacity: `exhausted` zones fail the insert *operation* with ZONE_RESOURCE_POOL_EXHAUSTED, as GCE does
  (the insert call itself answers 200 with a RUNNING operation).
- G16 persistent disks (https://cloud.google.com/compute/docs/reference/rest/v1/disks): zonal; a name taken
  in the zone is 409; an instance may attach an existing disk (`disks[].source`) of its own zone only
  (another zone's: 404), and a disk in READ_WRITE mode attaches to one instance at a time (400
  resourceInUseByAnotherResource, https://cloud.google.com/compute/docs/disks/sharing-disks-between-vms);
  deleting a disk an instance uses is 400 resourceInUseByAnotherResource; deleting an instance detaches
  its disks and deletes those whose `autoDelete` is true (instances.delete).
- G17 a guest OS shutdown stops the instance (issue 38): `guest_shutdown` is what the instance's own
  ``shutdown -h`` does — STOPPING, then TERMINATED, kept with its disks until deleted (a stopped instance
  bills its disks, not its machine: https://cloud.google.com/compute/docs/instances/instance-life-cycle).
  The fake runs no startup-script: a test that says a node shuts itself down calls it.
- G18 the VM metadata server (issue 38, `metadata`; served on 127.0.0.1 by ``tests/cloud/fake_gce_node.py``):
  ``Metadata-Flavor: Google`` required (else 403), GET only; ``project/project-id``, ``instance/name``,
  ``instance/zone`` (``projects/NUMBER/zones/ZONE``), and ``instance/service-accounts/default/token``
  (``{"access_token", "expires_in", "token_type": "Bearer"}``) — a token of the instance's service account
  whose scopes are those the instance was created with; an instance created without a service account has
  none: 404 (https://cloud.google.com/compute/docs/access/authenticate-workloads#applications,
  https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys). ``"default"`` in an insert's
  ``serviceAccounts`` is the project's default compute service account, ``NUMBER-compute@developer.gserviceaccount.com``
  (https://cloud.google.com/compute/docs/access/service-accounts#default_service_account).
- G19 access scopes (issue 38): a VM's token whose scopes include neither ``compute`` nor ``cloud-platform``
  (``compute.readonly`` for a read) is refused by the Compute API: 403 "Request had insufficient
  authentication scopes.", reason ``insufficientPermissions``, ErrorInfo reason
  ``ACCESS_TOKEN_SCOPE_INSUFFICIENT`` (https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam:
  "both the access scopes and the IAM roles"; https://cloud.google.com/compute/docs/api/how-tos/authorization).
- G20 IAM (issue 38): a service account of `denied` (no role with ``compute.instances.delete``: the default
  service account where the organization enforces ``iam.automaticIamGrantsForDefaultServiceAccounts``, so it
  has no Editor role) is refused: 403 ``forbidden``, "Required 'compute.instances.delete' permission for
  'projects/P/zones/Z/instances/N'" (https://cloud.google.com/compute/docs/access/iam; error shape:
  https://cloud.google.com/compute/docs/reference/rest/v1/instances/delete,
  https://cloud.google.com/apis/design/errors).
- G21 actAs (issue 38): attaching a service account to an instance needs ``iam.serviceAccounts.actAs`` on it
  for the *caller* (roles/iam.serviceAccountUser; Owner and Editor have it, Compute Instance Admin alone does
  not: https://cloud.google.com/compute/docs/access/create-enable-service-accounts-for-instances,
  https://cloud.google.com/compute/docs/access/iam). The caller's IAM permissions beyond Compute's are
  `caller_permissions` (default: with actAs, as an Owner/Editor). An insert with ``serviceAccounts`` from a
  caller without it creates nothing and is refused in one of the two shapes real answers show
  (`act_as_answer`): ``"insert"``, the call answers 400, reason ``badRequest``, "The user does not have access
  to service account 'EMAIL'.  User: 'CALLER'.  Ask a project owner to grant you the iam.serviceAccountUser
  role on the service account" (Terraform prints it "…, badRequest": a GKE/GCE create in
  github.com/ansible/ansible-modules-core/issues/2595 and public Terraform configurations); ``"operation"``,
  the call answers 200 and its operation ends DONE with ``httpErrorStatusCode`` 400 and error code
  ``SERVICE_ACCOUNT_ACCESS_DENIED`` (github.com/kubicorn/kubicorn/issues/475, an instance group's creates;
  a captured ``instances.insert`` operation in a public lab log).
"""

from __future__ import annotations

import base64
import csv
import itertools
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse
from tests.cloud.fake_http import load_state, save_state

COMPUTE = "https://compute.googleapis.com/compute/v1"

#: the zones of a few regions, as GCE lists them
ZONES = {"us-central1": "abcf", "us-east1": "bcd", "us-east4": "abc", "us-west1": "abc", "us-west2": "abc",
         "europe-west1": "bcd", "europe-west4": "abc", "asia-east1": "abc"}

IMAGES = {"projects/ubuntu-os-cloud/global/images/ubuntu-2204-jammy-v20251101",
          "projects/debian-cloud/global/images/debian-12-bookworm-v20251101"}
FAMILIES = {"projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts",
            "projects/debian-cloud/global/images/family/debian-12",
            "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"}
#: G10: boot disk types per machine series (the longest listed prefix wins); see the module docstring
DISK_TYPES = {"e2-": {"pd-standard", "pd-balanced", "pd-ssd"}, "n1-": {"pd-standard", "pd-balanced", "pd-ssd"},
              "n2-": {"pd-standard", "pd-balanced", "pd-ssd"}, "a2-": {"pd-standard", "pd-balanced", "pd-ssd"},
              "g2-": {"pd-balanced", "pd-ssd"},
              "a3-highgpu-": {"pd-balanced", "pd-ssd", "hyperdisk-balanced"},
              "a3-edgegpu-": {"pd-balanced", "pd-ssd", "hyperdisk-balanced"},
              "a3-megagpu-": {"hyperdisk-balanced"}, "a3-ultragpu-": {"hyperdisk-balanced"},
              "a4-": {"hyperdisk-balanced"}}
#: G11: machines GCE does not sell on the STANDARD (on-demand) provisioning model
NOT_STANDARD = ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-ultragpu-", "a4-")
CATALOG = Path(__file__).parent / "catalogs" / "gcp_gpu.csv"
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
N1_GPUS = {"nvidia-tesla-t4": "T4", "nvidia-tesla-v100": "V100", "nvidia-tesla-p100": "P100", "nvidia-tesla-p4": "P4"}


def _catalog_offers() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(machine -> zones, GPU model -> zones) from the catalog's rows (tests/cloud/catalogs/gcp_gpu.csv)."""
    machines: dict[str, set[str]] = {}
    gpus: dict[str, set[str]] = {}
    with CATALOG.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["InstanceType"]:
                machines.setdefault(row["InstanceType"], set()).add(row["AvailabilityZone"])
            elif row["AcceleratorName"]:
                gpus.setdefault(row["AcceleratorName"], set()).add(row["AvailabilityZone"])
    return machines, gpus


def _series(machine: str, table: dict[str, Any]) -> Any:
    prefix = max((p for p in table if machine.startswith(p)), key=len, default=None)
    return table.get(prefix) if prefix else None


def _error(status: int, reason: str, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": status, "message": message, "errors": [{"reason": reason, "message": message}]}}


class FakeGCE:
    """FAKE GCE for one project (see the module docstring for the rules it enforces)."""

    hosts = ("compute.googleapis.com", "oauth2.googleapis.com")

    def __init__(self, project: str = "proj-1") -> None:
        self.project = project
        self.instances: dict[tuple[str, str], dict] = {}  # (zone, name) -> instance
        self.disks: dict[tuple[str, str], dict] = {}  # (zone, name) -> persistent disk (not boot disks)
        self.firewalls: dict[str, dict] = {}
        self.operations: dict[str, dict] = {}
        self.networks: dict[str, str] = {"default": "auto"}  # name -> "auto" | "custom"
        self.subnetworks: set[tuple[str, str]] = set()  # (region, name)
        self.exhausted: set[str] = set()  # zones that fail inserts with ZONE_RESOURCE_POOL_EXHAUSTED
        self.service_accounts: dict[str, Any] = {}  # client_email -> public key
        self.users: dict[str, tuple[str, str]] = {}  # refresh_token -> (client_id, client_secret)
        self.tokens: set[str] = set()
        self.inserts: list[dict] = []  # every instances.insert body, accepted or not
        self.refused: list[str] = []  # every refusal's message
        self._ids = itertools.count(1)
        self.machines, self.gpus = _catalog_offers()
        #: every zone: the documented ones of `ZONES` and every zone the catalog has a row in
        self.zones: dict[str, set[str]] = {region: set(letters) for region, letters in ZONES.items()}
        for zones in (*self.machines.values(), *self.gpus.values()):
            for zone in zones:
                region, _, letter = zone.rpartition("-")
                self.zones.setdefault(region, set()).add(letter)
        #: refusals to inject: a machine type or a region -> the message of a 400 badRequest at insert
        self.refusals: dict[str, str] = {}
        self.insert_faults: dict[int, tuple[int, str, bool]] = {}  # G15
        self.insert_calls = 0
        self.peak = 0  # the most instances alive at once
        self.number = "123456789012"  # the project's number (G18)
        self.node_tokens: dict[str, tuple[str, list[str]]] = {}  # G18: a VM's token -> (service account, scopes)
        self.denied: set[str] = set()  # G20: service accounts without compute.instances.delete
        #: G21: the caller's IAM permissions beyond Compute's (an Owner's or Editor's: with actAs)
        self.caller_permissions: set[str] = {"iam.serviceAccounts.actAs"}
        self.act_as_answer = "insert"  # G21: "insert" (400 on the call) or "operation" (the operation fails)
        self.callers: dict[str, str] = {}  # a token -> who it was issued to (G21's message names the caller)
        self._caller = ""

    @property
    def default_service_account(self) -> str:
        return f"{self.number}-compute@developer.gserviceaccount.com"

    def save(self, path: Any) -> None:
        """The project's state to `path` (replaced whole): a test hands it from a process it kills to the next."""
        from cryptography.hazmat.primitives import serialization

        state = {k: v for k, v in vars(self).items() if k not in ("_ids", "service_accounts")}
        state["service_accounts"] = {email: key.public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo)
                                     for email, key in self.service_accounts.items()}
        save_state(path, state)

    @classmethod
    def load(cls, path: Any) -> FakeGCE:
        """The project `save` wrote: the same instances, firewalls and accounts, new ids after theirs."""
        from cryptography.hazmat.primitives import serialization

        fake = cls()
        state = load_state(path)
        state["service_accounts"] = {email: serialization.load_pem_public_key(pem)
                                     for email, pem in state["service_accounts"].items()}
        vars(fake).update(state)
        taken = [int(re.sub(r"\D", "", x) or 0) for x in (*fake.operations, *fake.tokens)]
        taken += [int(i["id"]) - 1000 for i in fake.instances.values()]
        fake._ids = itertools.count(max(taken, default=0) + 1)
        return fake

    def _node_refusal(self, token: str, method: str, path: str) -> tuple[int, Any] | None:
        """G19/G20: why the Compute API refuses a VM's token for `method` on `path` (None: it does not)."""
        email, scopes = self.node_tokens[token]
        names = {s.rsplit("/", 1)[-1] for s in scopes}
        if not names & {"compute", "cloud-platform"} and not (method == "GET" and "compute.readonly" in names):
            status, body = _error(403, "insufficientPermissions", "Request had insufficient authentication scopes.")
            body["error"]["status"] = "PERMISSION_DENIED"
            body["error"]["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                         "reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "domain": "googleapis.com",
                                         "metadata": {"service": "compute.googleapis.com"}}]
            return status, body
        if email in self.denied and method == "DELETE":
            return _error(403, "forbidden", f"Required 'compute.instances.delete' permission for "
                                            f"'projects/{self.project}/{path}'")
        return None

    # ---- credentials -------------------------------------------------------------------------------

    def service_account_file(self, path: Any, email: str = "skyhive@proj-1.iam.gserviceaccount.com") -> None:
        """Write a service account key file whose key this fake trusts."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        self.service_accounts[email] = key.public_key()
        path.write_text(json.dumps({"type": "service_account", "project_id": self.project, "private_key_id": "k1",
                                    "private_key": pem, "client_email": email,
                                    "token_uri": "https://oauth2.googleapis.com/token"}))

    def user_file(self, path: Any) -> None:
        """Write gcloud's ``application_default_credentials.json`` for a user (no project in it)."""
        self.users["1//refresh-token"] = ("client-id.apps.googleusercontent.com", "client-secret")
        path.write_text(json.dumps({"type": "authorized_user", "client_id": "client-id.apps.googleusercontent.com",
                                    "client_secret": "client-secret", "refresh_token": "1//refresh-token"}))

    def _token(self, form: dict[str, str]) -> tuple[int, Any]:
        grant = form.get("grant_type")
        if grant == "refresh_token":
            known = self.users.get(form.get("refresh_token", ""))
            if known is None or known != (form.get("client_id"), form.get("client_secret")):
                return 400, {"error": "invalid_grant", "error_description": "Bad Request"}
        elif grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            if not self._jwt_ok(form.get("assertion", "")):
                return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        else:
            return 400, {"error": "unsupported_grant_type"}
        token = f"ya29.fake-{next(self._ids)}"
        self.tokens.add(token)
        self.callers[token] = self._issued_to(form)
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}

    @staticmethod
    def _issued_to(form: dict[str, str]) -> str:
        """Who a token grant is for: the service account that signed the JWT, or the user."""
        if form.get("grant_type") == "refresh_token":
            return "user@example.com"
        claims = form.get("assertion", "").split(".")[1]
        return json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["iss"]

    def _jwt_ok(self, assertion: str) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            header, claims, signature = assertion.split(".")
            data = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
            key = self.service_accounts[data["iss"]]
            key.verify(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)),
                       f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
            return data.get("aud") == "https://oauth2.googleapis.com/token" and "scope" in data
        except (ValueError, KeyError, InvalidSignature):
            return False

    # ---- dispatch ----------------------------------------------------------------------------------

    def answer(self, method: str, url: str, headers: Any, body: bytes | None) -> tuple[int, Any]:
        parsed = urlparse(url)
        if parsed.hostname == "oauth2.googleapis.com":
            return self._token({k: v[0] for k, v in parse_qs((body or b"").decode()).items()})
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self.tokens and token not in self.node_tokens:  # G9
            return _error(401, "authError", "Request had invalid authentication credentials.")
        prefix = f"/compute/v1/projects/{self.project}/"
        if not parsed.path.startswith(prefix):
            return _error(403, "forbidden", f"Permission denied on {parsed.path}")
        path = parsed.path.removeprefix(prefix)
        refusal = self._node_refusal(token, method, path) if token in self.node_tokens else None
        if refusal is not None:  # G19, G20
            self.refused.append(refusal[1]["error"]["message"])
            return refusal
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        data = json.loads(body) if body else None
        self._caller = self.callers.get(token, "")
        status, payload = self._route(method, path.split("/"), query, data)
        if status >= 400:
            self.refused.append(payload["error"]["message"])
        return status, payload

    def _route(self, method: str, parts: list[str], query: dict, data: Any) -> tuple[int, Any]:
        match (method, parts):
            case ("GET", ["regions", region]):
                if region not in self.zones:
                    return self._not_found(f"regions/{region}")
                return 200, {"name": region, "zones": [f"{COMPUTE}/projects/{self.project}/zones/{region}-{z}"
                                                       for z in sorted(self.zones[region])]}
            case ("GET", ["zones", zone]):
                return (200, {"name": zone, "status": "UP"}) if self._zone_ok(zone) else self._not_found(f"zones/{zone}")
            case ("POST", ["zones", zone, "instances"]):
                return self._insert(zone, data)
            case ("GET", ["zones", zone, "instances", name]):
                instance = self.instances.get((zone, name))
                if instance is None or not self._advance(zone, name, instance):
                    return self._not_found(f"zones/{zone}/instances/{name}")
                return 200, self._public(instance)
            case ("DELETE", ["zones", zone, "instances", name]):
                instance = self.instances.get((zone, name))
                if instance is None:
                    return self._not_found(f"zones/{zone}/instances/{name}")
                instance["status"] = "STOPPING"  # G14: gone after one more read (its disks let go then: G16)
                instance.setdefault("_deleting", 1)
                return 200, self._operation("delete", f"zones/{zone}/instances/{name}", zone)
            case ("POST", ["zones", zone, "disks"]):
                return self._disk(zone, data)
            case ("GET", ["zones", zone, "disks", name]):
                disk = self.disks.get((zone, name))
                return (200, disk) if disk is not None else self._not_found(f"zones/{zone}/disks/{name}")
            case ("DELETE", ["zones", zone, "disks", name]):
                disk = self.disks.get((zone, name))
                if disk is None:
                    return self._not_found(f"zones/{zone}/disks/{name}")
                if disk["users"]:  # G16
                    return _error(400, "resourceInUseByAnotherResource", f"The disk resource 'projects/{self.project}/"
                                  f"zones/{zone}/disks/{name}' is already being used by '{disk['users'][0]}'")
                del self.disks[(zone, name)]
                return 200, self._operation("delete", f"zones/{zone}/disks/{name}", zone)
            case ("GET", ["aggregated", "disks"]):
                match = re.fullmatch(r"labels\.([-_a-z0-9]+) = ([-_a-z0-9]+)", query.get("filter", "").strip())
                items: dict[str, dict] = {}
                for (zone, _), disk in sorted(self.disks.items()):
                    if match is None or (disk.get("labels") or {}).get(match.group(1)) == match.group(2):
                        items.setdefault(f"zones/{zone}", {"disks": []})["disks"].append(disk)
                return 200, {"items": items}
            case ("GET", ["aggregated", "instances"]):
                return 200, {"items": self._aggregated(query.get("filter", ""))}
            case ("GET", ["zones", _, "operations", name]) | ("GET", ["global", "operations", name]):
                op = self.operations.get(name)
                if op is None:
                    return self._not_found(f"operations/{name}")
                if op.get("_polls", 0) > 0:  # G13
                    op["_polls"] -= 1
                    return 200, {k: v for k, v in op.items() if not k.startswith("_")} | {"status": "RUNNING"}
                return 200, {k: v for k, v in op.items() if not k.startswith("_")}
            case ("GET", ["global", "firewalls"]):
                return 200, {"items": list(self.firewalls.values())}
            case ("POST", ["global", "firewalls"]):
                return self._firewall(data)
            case ("DELETE", ["global", "firewalls", name]):
                if self.firewalls.pop(name, None) is None:
                    return self._not_found(f"global/firewalls/{name}")
                return 200, self._operation("delete", f"global/firewalls/{name}", None)
        return _error(400, "invalid", f"FAKE GCE does not implement {method} {'/'.join(parts)}")

    # ---- resources ---------------------------------------------------------------------------------

    def _not_found(self, what: str) -> tuple[int, Any]:
        return _error(404, "notFound", f"The resource 'projects/{self.project}/{what}' was not found")

    def _zone_ok(self, zone: str) -> bool:
        region, _, letter = zone.rpartition("-")
        return letter in self.zones.get(region, ()) and len(letter) == 1

    def _operation(self, kind: str, target: str, zone: str | None, error: dict | None = None,
                   status: int = 503) -> dict:
        name = f"operation-{next(self._ids)}"
        where = f"zones/{zone}" if zone else "global"
        link = f"{COMPUTE}/projects/{self.project}/{where}/operations/{name}"
        done = {"kind": "compute#operation", "name": name, "operationType": kind, "status": "DONE",
                "targetLink": f"{COMPUTE}/projects/{self.project}/{target}", "selfLink": link}
        if error is not None:
            done.update(error={"errors": [error]}, httpErrorStatusCode=status)
        self.operations[name] = {**done, "_polls": 1}  # G13: RUNNING at the first poll, DONE at the second
        return {**done, "status": "RUNNING"}  # the call answers before the work is done

    def _strip(self, link: str) -> str:
        return re.sub(rf"^({re.escape(COMPUTE)}/)?(projects/{re.escape(self.project)}/)?", "", link or "")

    def _insert(self, zone: str, body: dict) -> tuple[int, Any]:
        self.inserts.append(body)
        self.insert_calls += 1
        fault = self.insert_faults.get(self.insert_calls)  # G15
        if fault is not None:
            status, reason, created = fault
            if created:
                self._insert_checked(zone, body)
            return _error(status, reason, f"FAKE GCE: injected {reason} at insert #{self.insert_calls}")
        return self._insert_checked(zone, body)

    def _insert_checked(self, zone: str, body: dict) -> tuple[int, Any]:
        if not self._zone_ok(zone):  # G2
            return self._not_found(f"zones/{zone}")
        name = body.get("name", "")
        if not NAME.match(name):  # G8
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. Must be a match of "
                                          f"regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'")
        bad = [v for v in (body.get("labels") or {}).values() if not re.match(r"^[-_a-z0-9]{0,63}$", v)]
        if bad:
            return _error(400, "invalid", f"Invalid value for field 'resource.labels': {bad[0]!r}")
        if (zone, name) in self.instances:
            return _error(409, "alreadyExists", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                                                f"already exists")
        machine = self._strip(body.get("machineType", "")).rsplit("/", 1)[-1]
        family = machine.split("-", 1)[0]
        refusal = self.refusals.get(machine) or self.refusals.get(zone.rpartition("-")[0])
        if refusal:  # injected
            return _error(400, "badRequest", refusal)
        if family not in ("e2", "n1", "n2") and zone not in self.machines.get(machine, set()):  # G3
            return self._not_found(f"zones/{zone}/machineTypes/{machine}")
        used = []
        for disk in body.get("disks") or []:
            if disk.get("source"):  # G16: an existing disk, of this zone, used by no other instance
                where = self._strip(disk["source"]).split("/")
                if len(where) != 4 or where[1] != zone or (zone, where[3]) not in self.disks:
                    return self._not_found(self._strip(disk["source"]))
                users = self.disks[(zone, where[3])]["users"]
                if users:
                    return _error(400, "resourceInUseByAnotherResource", f"The disk resource 'projects/{self.project}/"
                                  f"zones/{zone}/disks/{where[3]}' is already being used by '{users[0]}'")
                used.append(where[3])
                continue
            image = self._strip((disk.get("initializeParams") or {}).get("sourceImage", ""))  # G1, G12
            if image not in IMAGES and image not in FAMILIES:
                return self._not_found(image.removeprefix(f"projects/{self.project}/"))
            disk_type = self._strip((disk.get("initializeParams") or {}).get("diskType", "")).rsplit("/", 1)[-1]
            allowed = _series(machine, DISK_TYPES) or set()
            if (disk_type or "pd-standard") not in allowed:  # G10
                return _error(400, "badRequest", f"Invalid resource usage: '[{disk_type or 'pd-standard'}] disk "
                                                 f"type is not supported by machine type {machine}.'")
        accelerators = body.get("guestAccelerators") or []
        for acc in accelerators:  # G3, G5
            kind = self._strip(acc.get("acceleratorType", "")).rsplit("/", 1)[-1]
            if family != "n1":
                return _error(400, "invalid", f"Invalid resource usage: 'Machine type {machine} does not support "
                                              f"guest accelerators; its GPUs are attached automatically.'")
            if zone not in self.gpus.get(N1_GPUS.get(kind, ""), set()):
                return self._not_found(f"zones/{zone}/acceleratorTypes/{kind}")
        scheduling = body.get("scheduling") or {}
        gpu = bool(accelerators) or family in ("a2", "a3", "a4", "g2")
        if gpu and scheduling.get("onHostMaintenance", "MIGRATE") != "TERMINATE":  # G4
            return _error(400, "invalid", "Instances with guest accelerators do not support live migration.")
        if scheduling.get("provisioningModel", "STANDARD") == "STANDARD" and machine.startswith(NOT_STANDARD):  # G11
            return _error(400, "badRequest", f"Invalid value for field 'resource.scheduling.provisioningModel': "
                                             f"'STANDARD'. Machine type {machine} is only available with the "
                                             f"SPOT or FLEX_START provisioning model, or a reservation.")
        if scheduling.get("provisioningModel") == "SPOT":  # G6
            if scheduling.get("automaticRestart", True) or scheduling.get("onHostMaintenance") != "TERMINATE":
                return _error(400, "invalid", "Invalid value for field 'resource.scheduling': Spot VMs require "
                                              "automaticRestart false and onHostMaintenance TERMINATE.")
        for nic in body.get("networkInterfaces") or [{}]:  # G7
            network = self._strip(nic.get("network", "global/networks/default")).rsplit("/", 1)[-1]
            if network not in self.networks:
                return self._not_found(f"global/networks/{network}")
            subnet = self._strip(nic.get("subnetwork", ""))
            if self.networks[network] == "custom":
                parts = subnet.split("/")
                if not subnet:
                    return _error(400, "invalid", "Invalid value for field 'resource.networkInterfaces[0]': "
                                                  "Subnetwork should be specified for custom subnetmode network")
                if (parts[1], parts[-1]) not in self.subnetworks:
                    return self._not_found(subnet)
        accounts = [{**a, "email": self.default_service_account if a.get("email") == "default" else a.get("email")}
                    for a in body.get("serviceAccounts") or []]  # G18
        if accounts and "iam.serviceAccounts.actAs" not in self.caller_permissions:  # G21
            message = (f"The user does not have access to service account '{accounts[0]['email']}'.  User: "
                       f"'{self._caller}'.  Ask a project owner to grant you the iam.serviceAccountUser role on the "
                       f"service account")
            if self.act_as_answer == "operation":
                return 200, self._operation("insert", f"zones/{zone}/instances/{name}", zone,
                                            {"code": "SERVICE_ACCOUNT_ACCESS_DENIED", "message": message}, status=400)
            return _error(400, "badRequest", message)
        if zone in self.exhausted:
            return 200, self._operation("insert", f"zones/{zone}/instances/{name}", zone, {
                "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                "message": f"The zone 'projects/{self.project}/zones/{zone}' does not have enough resources "
                           f"available to fulfill the request. Try a different zone, or try again later."})
        n = next(self._ids)
        for disk_name in used:
            self.disks[(zone, disk_name)]["users"].append(f"projects/{self.project}/zones/{zone}/instances/{name}")
        self.instances[(zone, name)] = {
            **body, "serviceAccounts": accounts, "id": str(1000 + n),
            "zone": f"{COMPUTE}/projects/{self.project}/zones/{zone}",
            "machineType": f"{COMPUTE}/projects/{self.project}/zones/{zone}/machineTypes/{machine}",
            "status": "PROVISIONING",
            "networkInterfaces": [{**(body.get("networkInterfaces") or [{}])[0], "networkIP": f"10.128.0.{n % 250 + 2}",
                                   "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "natIP": f"203.0.113.{n % 250 + 2}"}]}]}
        self.peak = max(self.peak, len(self.instances))
        return 200, self._operation("insert", f"zones/{zone}/instances/{name}", zone)

    def guest_shutdown(self, zone: str, name: str) -> None:
        """G17: the instance's OS shut down (its own ``shutdown -h``): STOPPING now, TERMINATED from the next read."""
        self.instances[(zone, name)]["status"] = "STOPPING"

    def _advance(self, zone: str, name: str, instance: dict) -> bool:
        """One read of an instance; False when it is gone (G14: a deleted one is STOPPING for one read)."""
        if "_deleting" in instance:
            if instance["_deleting"] <= 0:
                self.instances.pop((zone, name), None)
                self._release_disks(zone, name, instance)
                return False
            instance["_deleting"] -= 1
            return True
        instance["status"] = {"PROVISIONING": "STAGING", "STAGING": "RUNNING",
                              "STOPPING": "TERMINATED"}.get(instance["status"], instance["status"])
        return True

    def _release_disks(self, zone: str, name: str, instance: dict) -> None:
        """G16: a deleted instance lets go of its persistent disks; those attached with autoDelete go with it."""
        link = f"projects/{self.project}/zones/{zone}/instances/{name}"
        for key, disk in list(self.disks.items()):
            if link in disk["users"]:
                disk["users"].remove(link)
                attached = [d for d in instance.get("disks") or [] if d.get("source", "").endswith(f"disks/{key[1]}")]
                if attached and attached[0].get("autoDelete"):
                    del self.disks[key]

    def _public(self, instance: dict) -> dict:
        return {k: v for k, v in instance.items() if not k.startswith("_")}

    def _aggregated(self, text: str) -> dict:
        match = re.fullmatch(r"labels\.([-_a-z0-9]+) = ([-_a-z0-9]+)", text.strip()) if text else None
        if text and match is None:
            raise AssertionError(f"FAKE GCE: unsupported filter {text!r}")
        items: dict[str, dict] = {}
        for (zone, name), instance in sorted(self.instances.items()):
            if match and (instance.get("labels") or {}).get(match.group(1)) != match.group(2):
                continue
            if not self._advance(zone, name, instance):
                continue
            items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(self._public(instance))
        return items

    def _disk(self, zone: str, body: dict) -> tuple[int, Any]:
        if not self._zone_ok(zone):  # G2
            return self._not_found(f"zones/{zone}")
        name = body.get("name", "")
        if not NAME.match(name):  # G8
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'")
        if (zone, name) in self.disks:  # G16
            return _error(409, "alreadyExists", f"The resource 'projects/{self.project}/zones/{zone}/disks/{name}' "
                                                f"already exists")
        self.disks[(zone, name)] = {**body, "id": str(next(self._ids)), "status": "READY", "users": [],
                                    "zone": f"{COMPUTE}/projects/{self.project}/zones/{zone}",
                                    "sizeGb": str(body.get("sizeGb", "500"))}
        return 200, self._operation("insert", f"zones/{zone}/disks/{name}", zone)

    def _firewall(self, body: dict) -> tuple[int, Any]:
        name = body.get("name", "")
        if not NAME.match(name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'")
        network = self._strip(body.get("network", "global/networks/default")).rsplit("/", 1)[-1]
        if network not in self.networks:  # G7
            return self._not_found(f"global/networks/{network}")
        if name in self.firewalls:
            return _error(409, "alreadyExists", f"The resource 'projects/{self.project}/global/firewalls/{name}' "
                                                f"already exists")
        self.firewalls[name] = {**body, "id": str(next(self._ids))}
        return 200, self._operation("insert", f"global/firewalls/{name}", None)
