"""FAKE DigitalOcean API v2, in process, under `requests`.

No DigitalOcean emulator exists. `FakeDO` keeps one account's SSH keys, tags, firewalls and droplets in
memory and refuses what the API refuses, rule by rule; each rule names the reference it encodes
(https://docs.digitalocean.com/reference/api/digitalocean/):

- D1 firewalls: every tag a firewall names (``tags``, and ``sources.tags``/``destinations.tags`` of its
  rules) must exist — "Create a New Firewall": tags must be existing tag names; the API answers 422
  otherwise. Tags are made with "Create a New Tag" (POST /v2/tags; a name that exists is returned again).
- D2 sizes by region: a size the catalog lists is offered only in its regions there (GPU droplets only in
  their GPU regions); another region answers 422 "Size is not available in this region". Basic sizes the
  catalog does not list (``s-2vcpu-4gb``) are taken as offered everywhere, as they are.
- D3 images: the slug must exist (``ubuntu-22-04-x64``, the GPU base images ``gpu-h100x1-base``/
  ``gpu-h100x8-base``); a GPU size needs a GPU image (GPU Droplets are created from the AI/ML-ready images).
- D4 ``ssh_keys`` must name keys of the account (id or fingerprint); 422 otherwise.
- D5 every call needs the bearer token (401 ``unauthorized``).
- D6 droplet names follow hostname rules (letters, digits, dots, dashes; a letter or digit at both ends):
  422 otherwise ("Create a New Droplet", ``name``; issue 38).
- D7 tag names: letters, digits, colons, dashes and underscores, 255 at most ("Create a New Tag",
  https://docs.digitalocean.com/reference/api/digitalocean/#tag/Tags/operation/tags_create; a droplet's
  ``tags`` likewise): 422 otherwise (issue 38). Firewall names: letters, digits, dots and dashes
  ("Create a New Firewall", ``name``).
- D8 rate limits and server errors (issue 38): `create_faults` maps the n-th droplet create (1-based) to
  (HTTP status, created): 429 ``too_many_requests`` creates nothing
  (https://docs.digitalocean.com/reference/api/digitalocean/#section/Introduction/Rate-Limit); a 5xx with
  created=True has made the droplet although the answer is an error. `peak`: most droplets alive at once.
- D9 volume names (issue 39): lower case letters, numbers and dashes, a letter first, 64 at most ("Create a
  New Block Storage Volume", ``name``: "Must be lowercase and be composed only of numbers, letters and '-',
  up to a limit of 64 characters. The name must begin with a letter."): 422 otherwise. A name is unique in
  its region (409 here: the reference names no status for it).
- D10 volume sizes: ``size_gigabytes`` from 1 to 16384 (the Block Storage introduction: "They may be created
  in sizes from 1GiB to 16TiB"): 422 otherwise; ``region`` is required (no snapshot is ever given).
- D11 attach (``POST /v2/volumes/{id}/actions``, ``type: attach``): the droplet must exist (404) and be in
  the volume's region ("Block Storage Actions": ``region`` is "the slug representing the region where the
  volume is located"; volumes "can be moved between Droplets within a specific region"): 422 otherwise.
- D12 a volume is attached to one droplet at a time, a droplet has at most fifteen ("Each volume may only be
  attached to a single Droplet. However, up to fifteen volumes may be attached to a Droplet at a time."):
  422 otherwise. Destroying a droplet detaches its volumes (they stay, ``droplet_ids`` empty).
- D13 deleting a volume a droplet has is refused (409 here: the reference says to detach first without
  naming a status; skyhive refuses before asking). ``DELETE /v2/volumes/{id}``: 204, 404 when gone.
- D14 custom-scoped tokens (issue 38, the node token): `scoped` maps a token to its scopes; a call whose scope
  (resource type and verb: ``droplet:read`` for ``GET /v2/droplets``, ``droplet:delete`` for ``DELETE
  /v2/droplets/ID``, ``account:read`` for ``GET /v2/account``, ...) the token lacks answers 403 with the
  API's error body ``{"id": "forbidden", "message": "You do not have access for the attempted action."}``
  (https://docs.digitalocean.com/reference/api/scopes/: "each endpoint specifies which scope is required";
  the error shape: https://docs.digitalocean.com/reference/api/digitalocean/#section/Introduction/Responses).
  A token the account does not hold answers D5's 401. The account's own token (`token`) has every scope.
- D15 the metadata service (https://docs.digitalocean.com/reference/api/metadata/droplet-properties/):
  ``GET /metadata/v1/id`` (the droplet id as text), ``hostname``, ``region``, ``user-data`` (what the droplet
  was created with, readable by any process on it: no authentication), served per droplet by
  `FakeDOServer` at ``<endpoint>/droplet/<id>`` (the real service is ``http://169.254.169.254``, which
  knows the caller by its address); a droplet that is gone has no metadata service (404 here).
- D16 an OS shutdown (``shutdown -h now`` on the droplet, `guest_shutdown`) powers the droplet off: status
  ``off``, still billed and listed (https://docs.digitalocean.com/products/droplets/details/pricing/: "you
  are still billed for a Droplet that is powered off").
- Sizes and their regions come from ``tests/cloud/catalogs/do.csv`` (a copy of shared/catalogs), never
  from skyhive's own table.
- Droplets are ``new`` when created and ``active`` (with a public and a private address) at the next read.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from tests.infra.loopback_http import FakeService
from tests.cloud.fake_http import load_state, save_state

HOSTNAME = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$")  # D6
TAG = re.compile(r"^[a-zA-Z0-9:_-]{1,255}$")  # D7
FIREWALL_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9.-]*$")  # D7
VOLUME_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")  # D9
IMAGES = {"ubuntu-22-04-x64", "ubuntu-24-04-x64", "gpu-h100x1-base", "gpu-h100x8-base"}


API = "https://api.digitalocean.com"
#: D14: the resource type of each top-level API path, and the verb of each method (scopes are "type:verb")
_SCOPE_TYPES = {"droplets": "droplet", "account": "account", "tags": "tag", "firewalls": "firewall",
                "volumes": "block_storage"}
_SCOPE_VERBS = {"GET": "read", "POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}


def _error(status: int, ident: str, message: str) -> tuple[int, dict]:
    return status, {"id": ident, "message": message}


def _scope(method: str, parts: list[str]) -> str:
    """D14: the scope a call needs (``/v2/account/keys`` is ``ssh_key``)."""
    kind = "ssh_key" if parts[1:3] == ["account", "keys"] else _SCOPE_TYPES.get(parts[1] if len(parts) > 1 else "", "?")
    return f"{kind}:{_SCOPE_VERBS.get(method, '?')}"


class FakeDO:
    """FAKE DigitalOcean (see the module docstring)."""

    hosts = ("api.digitalocean.com",)

    def __init__(self, token: str = "dop_v1_fake", scoped: dict[str, set[str]] | None = None) -> None:
        self.token = token
        self.scoped = {t: set(s) for t, s in (scoped or {}).items()}  # D14
        self.forbidden: list[tuple[str, str]] = []  # D14: (method, path) answered 403
        self.create_faults: dict[int, tuple[int, bool]] = {}  # D8
        self.create_calls = 0
        self.peak = 0
        self.keys: dict[int, dict] = {}
        self.tags: set[str] = set()
        self.firewalls: dict[str, dict] = {}
        self.droplets: dict[int, dict] = {}
        self.volumes: dict[str, dict] = {}
        self.created: list[dict] = []
        self.refused: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self._ids = itertools.count(3164494)
        self.size_regions: dict[str, set[str]] = {}
        self.gpu_sizes: set[str] = set()
        with (Path(__file__).parent / "catalogs" / "do.csv").open(newline="") as fh:
            for row in csv.DictReader(fh):
                self.size_regions.setdefault(row["InstanceType"], set()).add(row["Region"])
                if row["AcceleratorName"]:
                    self.gpu_sizes.add(row["InstanceType"])

    def answer(self, method: str, url: str, headers: Any, body: bytes | None) -> tuple[int, Any]:
        auth = str(headers.get("Authorization") or "")
        parsed = urlparse(url)
        parts = [unquote(p) for p in parsed.path.strip("/").split("/")]
        bearer = auth.removeprefix("Bearer ")
        if bearer != self.token:
            if bearer not in self.scoped or not auth.startswith("Bearer "):  # D5
                return _error(401, "unauthorized", "Unable to authenticate you.")
            if _scope(method, parts) not in self.scoped[bearer]:  # D14
                self.forbidden.append((method, parsed.path))
                return _error(403, "forbidden", "You do not have access for the attempted action.")
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        self.requests.append((method, parsed.path))
        data = json.loads(body) if body else None
        status, payload = self._route(method, parts, query, data)
        if status >= 400:
            self.refused.append(payload["message"])
        return status, payload

    def metadata(self, droplet_id: int, item: str) -> tuple[int, str]:
        """D15: the metadata service as droplet `droplet_id` sees it: (status, text)."""
        droplet = self.droplets.get(droplet_id)
        if droplet is None:
            return 404, "not found"
        values = {"id": str(droplet_id), "hostname": droplet["name"], "region": droplet["region"]["slug"],
                  "user-data": droplet.get("user_data") or ""}
        return (200, values[item]) if item in values else (404, "not found")

    def guest_shutdown(self, droplet_id: int) -> None:
        """D16: the droplet's OS shut down: it is powered off (``off``), listed and billed."""
        self._advance(self.droplets[droplet_id])
        self.droplets[droplet_id]["status"] = "off"

    def save(self, path: Any) -> None:
        """The account's state to `path` (replaced whole): a test hands it from a process it kills to the next."""
        save_state(path, {k: v for k, v in vars(self).items() if k != "_ids"})

    @classmethod
    def load(cls, path: Any) -> FakeDO:
        """The account `save` wrote: the same droplets, keys, tags and firewalls, new ids after theirs."""
        fake = cls()
        vars(fake).update(load_state(path))
        taken = [*fake.droplets, *fake.keys, *(int(f.removeprefix("fw-")) for f in fake.firewalls)]
        fake._ids = itertools.count(max(taken, default=3164494) + 1)
        return fake

    def _page(self, key: str, items: list) -> dict:
        return {key: items, "links": {}, "meta": {"total": len(items)}}

    def _route(self, method: str, parts: list[str], query: dict, data: Any) -> tuple[int, Any]:
        match (method, parts):
            case ("GET", ["v2", "account"]):  # "Get User Information" (#tag/Account)
                return 200, {"account": {"droplet_limit": 25, "floating_ip_limit": 5, "email": "sammy@example.com",
                                         "uuid": "b6fr89dbf6d9156cace5f3c78dc9851d957381ef", "email_verified": True,
                                         "status": "active", "status_message": ""}}
            case ("GET", ["v2", "account", "keys"]):
                return 200, self._page("ssh_keys", list(self.keys.values()))
            case ("POST", ["v2", "account", "keys"]):
                n = next(self._ids)
                key = {"id": n, "name": data["name"], "public_key": data["public_key"], "fingerprint": f"fp:{n}"}
                self.keys[n] = key
                return 201, {"ssh_key": key}
            case ("DELETE", ["v2", "account", "keys", ident]):
                if self.keys.pop(int(ident), None) is None:
                    return _error(404, "not_found", "The resource you were accessing could not be found.")
                return 204, None
            case ("POST", ["v2", "tags"]):
                if not TAG.match(data.get("name", "")):  # D7
                    return _error(422, "unprocessable_entity", f"tag name {data.get('name')!r}: tags may contain "
                                                               f"letters, numbers, colons, dashes, and underscores")
                self.tags.add(data["name"])
                return 201, {"tag": {"name": data["name"]}}
            case ("DELETE", ["v2", "tags", name]):
                if name not in self.tags:
                    return _error(404, "not_found", "The resource you were accessing could not be found.")
                self.tags.discard(name)
                return 204, None
            case ("GET", ["v2", "firewalls"]):
                return 200, self._page("firewalls", list(self.firewalls.values()))
            case ("POST", ["v2", "firewalls"]):
                return self._firewall(data)
            case ("DELETE", ["v2", "firewalls", ident]):
                if self.firewalls.pop(ident, None) is None:
                    return _error(404, "not_found", "The resource you were accessing could not be found.")
                return 204, None
            case ("POST", ["v2", "droplets"]):
                return self._droplet(data)
            case ("GET", ["v2", "droplets"]):
                for d in self.droplets.values():
                    self._advance(d)
                found = [d for d in self.droplets.values() if "tag_name" not in query or query["tag_name"] in d["tags"]]
                return 200, self._page("droplets", found)
            case ("DELETE", ["v2", "droplets", ident]):
                if self.droplets.pop(int(ident), None) is None:
                    return _error(404, "not_found", "The resource you were accessing could not be found.")
                for volume in self.volumes.values():  # D12: its volumes are detached, and stay
                    volume["droplet_ids"] = [d for d in volume["droplet_ids"] if d != int(ident)]
                return 204, None
            case ("GET", ["v2", "volumes"]):
                found = [v for v in self.volumes.values() if query.get("name", v["name"]) == v["name"]
                         and query.get("region", v["region"]["slug"]) == v["region"]["slug"]]
                return 200, self._page("volumes", found)
            case ("POST", ["v2", "volumes"]):
                return self._volume(data)
            case ("GET", ["v2", "volumes", ident]):
                if ident not in self.volumes:
                    return _error(404, "not_found", "The resource you were accessing could not be found.")
                return 200, {"volume": self.volumes[ident]}
            case ("DELETE", ["v2", "volumes", ident]):
                volume = self.volumes.get(ident)
                if volume is None:
                    return _error(404, "not_found", "The resource you were accessing could not be found.")
                if volume["droplet_ids"]:  # D13
                    return _error(409, "conflict", f"volume {ident} is attached to a Droplet: detach it first")
                del self.volumes[ident]
                return 204, None
            case ("POST", ["v2", "volumes", ident, "actions"]):
                return self._volume_action(ident, data)
        return _error(400, "bad_request", f"FAKE DigitalOcean does not implement {method} /{'/'.join(parts)}")

    def _firewall(self, data: dict) -> tuple[int, Any]:
        if not FIREWALL_NAME.match(data.get("name", "")):  # D7
            return _error(422, "unprocessable_entity", f"name {data.get('name')!r} is invalid")
        named = list(data.get("tags") or [])
        for rule in data.get("inbound_rules") or []:
            named += (rule.get("sources") or {}).get("tags") or []
        for rule in data.get("outbound_rules") or []:
            named += (rule.get("destinations") or {}).get("tags") or []
        missing = [t for t in named if t not in self.tags]
        if missing:  # D1
            return _error(422, "unprocessable_entity", f"tag {missing[0]!r} does not exist")
        ident = f"fw-{next(self._ids)}"
        self.firewalls[ident] = {"id": ident, **data, "status": "succeeded"}
        return 202, {"firewall": self.firewalls[ident]}

    def _volume(self, data: dict) -> tuple[int, Any]:
        name, size, region = str(data.get("name", "")), data.get("size_gigabytes"), data.get("region")
        if not VOLUME_NAME.match(name):  # D9
            return _error(422, "unprocessable_entity", f"name {name!r}: must be lowercase and be composed only of "
                                                       f"numbers, letters and '-', up to 64, beginning with a letter")
        if not isinstance(size, int) or not 1 <= size <= 16384 or not region:  # D10
            return _error(422, "unprocessable_entity", f"size_gigabytes {size!r} (1 to 16384) and region {region!r} "
                                                       f"are required")
        if any(v["name"] == name and v["region"]["slug"] == region for v in self.volumes.values()):  # D9
            return _error(409, "conflict", f"a volume named {name} already exists in {region}")
        ident = f"{next(self._ids):08x}-e098-11e5-b522-000f53304e51"
        self.volumes[ident] = {"id": ident, "name": name, "size_gigabytes": size, "region": {"slug": region,
                               "name": region}, "droplet_ids": [], "description": data.get("description", ""),
                               "filesystem_type": "", "tags": list(data.get("tags") or []),
                               "created_at": "2026-11-26T00:00:00Z"}
        return 201, {"volume": self.volumes[ident]}

    def _volume_action(self, ident: str, data: dict) -> tuple[int, Any]:
        volume = self.volumes.get(ident)
        if volume is None:
            return _error(404, "not_found", "The resource you were accessing could not be found.")
        droplet = self.droplets.get(int(data.get("droplet_id") or 0))
        if droplet is None:  # D11
            return _error(404, "not_found", f"droplet {data.get('droplet_id')!r} not found")
        region = volume["region"]["slug"]
        if data.get("region") != region or droplet["region"]["slug"] != region:  # D11
            return _error(422, "unprocessable_entity", f"volume {ident} is in {region}; the Droplet is in "
                                                       f"{droplet['region']['slug']} (request region {data.get('region')!r})")
        if data.get("type") == "attach":
            if volume["droplet_ids"] and volume["droplet_ids"] != [droplet["id"]]:  # D12
                return _error(422, "unprocessable_entity", f"volume {ident} is already attached to another Droplet")
            if sum(droplet["id"] in v["droplet_ids"] for v in self.volumes.values()) >= 15:  # D12
                return _error(422, "unprocessable_entity", "a Droplet has at most fifteen volumes attached")
            volume["droplet_ids"] = [droplet["id"]]
        elif data.get("type") == "detach":
            volume["droplet_ids"] = [d for d in volume["droplet_ids"] if d != droplet["id"]]
        else:
            return _error(422, "unprocessable_entity", f"unknown volume action {data.get('type')!r}")
        action = {"id": next(self._ids), "status": "completed", "type": f"{data['type']}_volume",
                  "resource_id": 0, "resource_type": "backend", "region_slug": region}
        return 202, {"action": action}

    def _droplet(self, data: dict) -> tuple[int, Any]:
        self.created.append(data)
        self.create_calls += 1
        fault = self.create_faults.get(self.create_calls)  # D8
        if fault is not None:
            status, created = fault
            if created:
                self._droplet_checked(data)
            return _error(status, "too_many_requests" if status == 429 else "server_error",
                          f"FAKE DigitalOcean: injected {status} at create #{self.create_calls}")
        return self._droplet_checked(data)

    def _droplet_checked(self, data: dict) -> tuple[int, Any]:
        if not HOSTNAME.match(str(data.get("name", ""))):  # D6
            return _error(422, "unprocessable_entity", f"{data.get('name')!r} is not a valid hostname")
        bad = [t for t in data.get("tags") or [] if not TAG.match(t)]
        if bad:  # D7
            return _error(422, "unprocessable_entity", f"tag name {bad[0]!r}: tags may contain letters, numbers, "
                                                       f"colons, dashes, and underscores")
        size, region, image = data.get("size"), data.get("region"), data.get("image")
        if size in self.size_regions and region not in self.size_regions[size]:  # D2
            return _error(422, "unprocessable_entity", f"Size is not available in this region ({size} in {region}).")
        if image not in IMAGES:  # D3
            return _error(422, "unprocessable_entity", f"You specified an invalid image for Droplet creation ({image}).")
        if size in self.gpu_sizes and not str(image).startswith("gpu-"):
            return _error(422, "unprocessable_entity", f"GPU Droplet size {size} needs a GPU image, not {image}.")
        known = {str(k["id"]) for k in self.keys.values()} | {k["fingerprint"] for k in self.keys.values()}
        if any(str(k) not in known for k in data.get("ssh_keys") or []):  # D4
            return _error(422, "unprocessable_entity", "ssh_keys: one or more keys do not exist")
        for tag in data.get("tags") or []:
            self.tags.add(tag)  # a droplet's tags are created with it
        n = next(self._ids)
        droplet = {"id": n, "name": data["name"], "memory": 4096, "vcpus": 2, "disk": 80, "locked": False,
                   "status": "new", "created_at": "2026-11-26T00:00:00Z", "features": [], "backup_ids": [],
                   "snapshot_ids": [], "image": {"id": 1, "name": image, "slug": image, "distribution": "Ubuntu",
                                                 "public": True, "regions": [region], "min_disk_size": 20,
                                                 "type": "snapshot", "created_at": "2026-01-01T00:00:00Z"},
                   "size_slug": size, "networks": {"v4": [], "v6": []}, "region": {"name": region, "slug": region},
                   "tags": list(data.get("tags") or []), "user_data": data.get("user_data")}
        self.droplets[n] = droplet
        self.peak = max(self.peak, len(self.droplets))
        return 202, {"droplet": droplet}

    def _advance(self, droplet: dict) -> None:
        if droplet["status"] == "new":
            n = droplet["id"] % 250 + 2
            droplet["status"] = "active"
            droplet["networks"] = {"v4": [{"ip_address": f"203.0.113.{n}", "type": "public"},
                                          {"ip_address": f"10.116.0.{n}", "type": "private"}], "v6": []}


class FakeDOServer(FakeService):
    """`FakeDO` on 127.0.0.1 for programs that are not Python (curl in a droplet's self-end script): ``/v2/...``
    is the API (`answer`, as if sent to api.digitalocean.com), ``/droplet/<id>/metadata/v1/<item>`` droplet
    ``id``'s metadata service (D15). One request at a time. Use as a context manager."""

    def __init__(self, fake: FakeDO) -> None:
        self.fake = fake
        super().__init__("fake-do")

    def metadata_url(self, droplet_id: int) -> str:
        """What the droplet would reach as ``http://169.254.169.254`` (D15)."""
        return f"{self.endpoint}/droplet/{droplet_id}"

    def respond(self, method: str, path: str, headers: Any, body: bytes | None) -> tuple[int, Any, dict[str, str]]:
        parts = path.split("?")[0].strip("/").split("/")
        if parts[:1] == ["droplet"] and parts[2:4] == ["metadata", "v1"] and len(parts) == 5:
            status, text = self.fake.metadata(int(parts[1]), parts[4]) if parts[1].isdigit() else (404, "")
            return status, text, {}
        status, payload = self.fake.answer(method, API + path, headers, body)
        return status, payload, {}
