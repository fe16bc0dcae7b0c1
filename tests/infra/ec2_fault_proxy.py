"""FakeEC2FaultProxy: a FAKE in front of a real `moto_server`, answering chosen calls as real EC2 fails them.

moto answers every call it implements and fails in its own dialect (namespaced error bodies; no
throttling, no eventual consistency, no placement groups). Real EC2 sends, for an error, an
un-namespaced body with HTTP 4xx/5xx (EC2 API reference, "Error codes" and "Query API request
responses": ``<Response><Errors><Error><Code>..</Code><Message>..</Message></Error></Errors>
<RequestID>..</RequestID></Response>``; throttling ``RequestLimitExceeded`` is 503, client errors such
as ``*.NotFound`` are 400, ``InternalError`` is 500). This proxy forwards every request to moto_server
unchanged, except:

- faults: the n-th call of an ``Action`` is answered with an EC2 error, either *instead of* forwarding
  (the call did nothing: throttling as AWS documents it) or *after* forwarding (the call took effect,
  its answer was lost: a dropped connection, which a client cannot tell from a refusal);
- placement groups, which moto does not implement: Create/Describe/DeletePlacementGroup are answered
  here, with EC2's refusals (API reference, CreatePlacementGroup / DeletePlacementGroup / RunInstances):
  a strategy other than cluster|spread|partition -> ``InvalidParameterValue``; a duplicate name ->
  ``InvalidPlacementGroup.Duplicate``; an unknown name to delete or to launch into ->
  ``InvalidPlacementGroup.Unknown``; deleting a group that still holds a live instance ->
  ``InvalidPlacementGroup.InUse``. ``Placement.GroupName`` is removed before RunInstances reaches moto
  (which would ignore it) and the instances it made are remembered as members.

- expired credentials: a call signed (SigV4 ``Authorization: ... Credential=KEY/...``) with an access key
  named in ``expired`` is refused, as AWS refuses a call whose temporary credentials have expired: HTTP
  403, code ``ExpiredToken``, "The security token included in the request is expired" (AWS Common
  Errors, ExpiredToken(Exception) 403; AWS re:Post "security-token-expired").

- network interfaces (RunInstances API reference, ``AssociatePublicIpAddress``: "You cannot specify more
  than one network interface in the request"; EC2 User Guide, "Maximize network bandwidth ... with
  multiple network cards": an EFA-only interface cannot be the primary one): a RunInstances with several
  ``NetworkInterface.N`` and a public address asked for -> ``InvalidParameterCombination``; an
  ``efa-only`` interface at network card 0, device 0 -> ``InvalidParameterCombination``. An instance
  launched with several interfaces has no public address (EC2 assigns none), so its ``ipAddress`` is
  removed from DescribeInstances answers until an Elastic IP is associated with one of its interfaces
  (AssociateAddress ``NetworkInterfaceId``) — moto would show one regardless.

Every request is recorded (``calls``: action and its parameters; ``keys``: the access key it was signed
with) so that tests can read what was asked, and by whom.
It is a fake: what it answers by itself is only what the rules above say.
"""

from __future__ import annotations

import http.client
import itertools
import threading
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl, urlencode, urlsplit

from .loopback_http import LoopbackHTTPServer

__all__ = ["FakeEC2FaultProxy", "Fault", "ERROR_STATUS", "error_body"]

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"

#: HTTP status EC2 uses per error code (client errors 400 unless listed)
ERROR_STATUS = {"ExpiredToken": 403, "RequestLimitExceeded": 503, "Unavailable": 503, "ServiceUnavailable": 503,
                "InternalError": 500, "InternalFailure": 500, "AuthFailure": 401, "UnauthorizedOperation": 403}


def error_body(code: str, message: str) -> bytes:
    """An error as real EC2 sends it: un-namespaced."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code><Message>'
            f"{message}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>").encode()


@dataclass
class Fault:
    """Answer calls number `at` (1-based, counted per action) .. `at + times - 1` of `action` with `code`;
    `after_forward`: the call reaches moto first (it happened), then the error is answered."""

    action: str
    code: str
    at: int = 1
    times: int = 1
    after_forward: bool = False
    message: str = "injected by FakeEC2FaultProxy"

    def hits(self, n: int) -> bool:
        return self.at <= n < self.at + self.times


@dataclass
class _PlacementGroup:
    name: str
    strategy: str
    group_id: str
    tags: list[tuple[str, str]] = field(default_factory=list)
    members: set[str] = field(default_factory=set)


class FakeEC2FaultProxy(LoopbackHTTPServer):
    """A FAKE EC2 endpoint: forwards to moto_server at `upstream` (``http://127.0.0.1:PORT``), injecting
    `faults` and serving placement groups (see the module docstring). Use as a context manager."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.keys: list[str] = []  # the access key each call was signed with, in the order of `calls`
        self.expired: set[str] = set()  # access keys refused as expired
        self.counts: dict[str, int] = {}
        self.placement_groups: dict[str, _PlacementGroup] = {}
        self.placement_log: list[str] = []  # "create NAME", "delete NAME"
        self.no_public_ip: dict[str, set[str]] = {}  # instance launched with several interfaces -> its ENIs
        self.associated: set[str] = set()  # ENIs an Elastic IP was associated with
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        super().__init__("fake-ec2-proxy")

    def fail(self, action: str, code: str, *, at: int = 1, times: int = 1, after_forward: bool = False) -> None:
        self.faults.append(Fault(action, code, at=at, times=times, after_forward=after_forward))

    def actions(self, action: str) -> list[dict[str, str]]:
        """The parameters of every call of `action`, in order."""
        return [params for name, params in self.calls if name == action]

    # ---- the handler ---------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self._serve(b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._serve(self.rfile.read(length) if length else b"")

            def _serve(self, body: bytes) -> None:
                query = urlsplit(self.path).query
                params = dict(parse_qsl(query, keep_blank_values=True))
                ctype = self.headers.get("Content-Type", "")
                if body and "x-www-form-urlencoded" in ctype:
                    params.update(parse_qsl(body.decode(), keep_blank_values=True))
                status, headers, payload = proxy._answer(self.command, self.path, dict(self.headers), body, params)
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes,
                params: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        action = params.get("Action", "")
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        key = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""
        with self._lock:
            self.calls.append((action, dict(params)))
            self.keys.append(key)
            if key in self.expired:
                return self._error("ExpiredToken", "The security token included in the request is expired")
            n = self.counts[action] = self.counts.get(action, 0) + 1
            fault = next((f for f in self.faults if f.action == action and f.hits(n)), None)
        if fault is not None and not fault.after_forward:
            return self._error(fault.code, fault.message)
        if action == "RunInstances":
            refused = self._refuse_interfaces(params)
            if refused is not None:
                return refused
        if action in ("CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup"):
            answer = self._placement(action, params)
        else:
            if action == "RunInstances" and params.get("Placement.GroupName"):
                name = params["Placement.GroupName"]
                if name not in self.placement_groups:
                    return self._error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
                params = {k: v for k, v in params.items() if k != "Placement.GroupName"}
                method, path, body = "POST", urlsplit(path).path or "/", urlencode(params).encode()
                headers = {k: v for k, v in headers.items() if k.lower() not in ("content-length", "content-type")}
                headers["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8"
                answer = self._forward(method, path, headers, body)
                if answer[0] == 200:
                    ids = [el.text for el in ET.fromstring(answer[2]).iter() if el.tag.endswith("instanceId") and el.text]
                    self.placement_groups[name].members.update(ids)
            else:
                answer = self._forward(method, path, headers, body)
        if fault is not None:
            return self._error(fault.code, fault.message)
        return self._interfaces_seen(action, params, answer)

    # ---- network interfaces (moto checks none of this) ----------------------------------------------

    @staticmethod
    def _nics(params: dict[str, str]) -> dict[str, dict[str, str]]:
        nics: dict[str, dict[str, str]] = {}
        for key, value in params.items():
            if key.startswith("NetworkInterface."):
                n, _, field_name = key[len("NetworkInterface."):].partition(".")
                nics.setdefault(n, {})[field_name] = value
        return nics

    def _refuse_interfaces(self, params: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes] | None:
        nics = self._nics(params)
        if len(nics) > 1 and any(n.get("AssociatePublicIpAddress", "").lower() == "true" for n in nics.values()):
            return self._error("InvalidParameterCombination", "The associatePublicIPAddress parameter cannot be "
                                                              "specified when launching with multiple network interfaces.")
        for n in nics.values():
            if (n.get("InterfaceType") == "efa-only" and n.get("DeviceIndex", "0") == "0"
                    and n.get("NetworkCardIndex", "0") == "0"):
                return self._error("InvalidParameterCombination", "An EFA-only network interface cannot be the "
                                                                  "primary network interface.")
        return None

    def _interfaces_seen(self, action: str, params: dict[str, str], answer: tuple[int, list[tuple[str, str]], bytes]
                         ) -> tuple[int, list[tuple[str, str]], bytes]:
        if answer[0] != 200:
            return answer
        if action == "AssociateAddress" and params.get("NetworkInterfaceId"):
            self.associated.add(params["NetworkInterfaceId"])
        if action == "RunInstances" and len(self._nics(params)) > 1:
            for instance in self._instances(ET.fromstring(answer[2])):
                self.no_public_ip[_text(instance, "instanceId")] = {
                    _text(nic, "networkInterfaceId") for nic in _items(instance, "networkInterfaceSet")}
        if action == "DescribeInstances" and self.no_public_ip:
            root = ET.fromstring(answer[2])
            changed = False
            for instance in self._instances(root):
                enis = self.no_public_ip.get(_text(instance, "instanceId"))
                if enis is not None and not enis & self.associated:
                    for el in [c for c in instance if _local(c) == "ipAddress"]:
                        instance.remove(el)
                        changed = True
            if changed:
                ns = root.tag[1:].split("}", 1)[0] if root.tag.startswith("{") else ""
                ET.register_namespace("", ns)
                return answer[0], answer[1], ET.tostring(root, encoding="utf-8", xml_declaration=True)
        return answer

    @staticmethod
    def _instances(root: ET.Element) -> list[ET.Element]:
        found = []
        for set_name in ("instancesSet",):
            for el in root.iter():
                if _local(el) == set_name:
                    found += [c for c in el if _local(c) == "item"]
        return found

    def _error(self, code: str, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
        return ERROR_STATUS.get(code, 400), [("Content-Type", "text/xml;charset=UTF-8")], error_body(code, message)

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes
                 ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            send = {k: v for k, v in headers.items() if k.lower() not in ("connection", "content-length")}
            send["Content-Length"] = str(len(body))
            conn.request(method, path, body=body, headers=send)
            resp = conn.getresponse()
            payload = resp.read()
            keep = [(k, v) for k, v in resp.getheaders()
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server")]
            return resp.status, keep, payload
        finally:
            conn.close()

    # ---- placement groups (moto has none) -----------------------------------------------------------

    def _placement(self, action: str, params: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        name = params.get("GroupName", "")
        with self._lock:
            if action == "CreatePlacementGroup":
                strategy = params.get("Strategy", "")
                if strategy not in ("cluster", "spread", "partition"):
                    return self._error("InvalidParameterValue", f"Invalid strategy '{strategy}'")
                if name in self.placement_groups:
                    return self._error("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
                tags = [(params[k], params.get(k[:-3] + "Value", "")) for k in sorted(params)
                        if k.startswith("TagSpecification.1.Tag.") and k.endswith(".Key")]
                group = _PlacementGroup(name, strategy, f"pg-{next(self._ids):017x}", tags)
                self.placement_groups[name] = group
                self.placement_log.append(f"create {name}")
                inner = (f"<placementGroup><groupName>{name}</groupName><strategy>{strategy}</strategy>"
                         f"<state>available</state><groupId>{group.group_id}</groupId></placementGroup>")
                return self._ok("CreatePlacementGroupResponse", inner + "<return>true</return>")
            if action == "DeletePlacementGroup":
                group = self.placement_groups.get(name)
                if group is None:
                    return self._error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
                if self._live(group.members):
                    return self._error("InvalidPlacementGroup.InUse", f"The Placement Group '{name}' is in use.")
                del self.placement_groups[name]
                self.placement_log.append(f"delete {name}")
                return self._ok("DeletePlacementGroupResponse", "<return>true</return>")
            wanted = {v for k, v in params.items() if k.startswith("GroupName.")}
            filters = self._tag_filters(params)
            items = []
            for group in self.placement_groups.values():
                if wanted and group.name not in wanted:
                    continue
                if any(dict(group.tags).get(key) not in values for key, values in filters.items()):
                    continue
                tags = "".join(f"<item><key>{k}</key><value>{v}</value></item>" for k, v in group.tags)
                items.append(f"<item><groupName>{group.name}</groupName><strategy>{group.strategy}</strategy>"
                             f"<state>available</state><groupId>{group.group_id}</groupId><tagSet>{tags}</tagSet></item>")
            missing = wanted - set(self.placement_groups)
            if missing:
                return self._error("InvalidPlacementGroup.Unknown", f"The Placement Group '{sorted(missing)[0]}' is unknown.")
            return self._ok("DescribePlacementGroupsResponse", f"<placementGroupSet>{''.join(items)}</placementGroupSet>")

    @staticmethod
    def _tag_filters(params: dict[str, str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for key, value in params.items():
            if key.startswith("Filter.") and key.endswith(".Name") and value.startswith("tag:"):
                prefix = key[:-len("Name")]
                found[value[4:]] = {v for k, v in params.items() if k.startswith(prefix + "Value.")}
        return found

    def _live(self, ids: set[str]) -> bool:
        if not ids:
            return False
        import boto3

        client = boto3.client("ec2", region_name="us-east-1", endpoint_url=f"http://{self.upstream[0]}:{self.upstream[1]}")
        states = [i["State"]["Name"] for r in client.describe_instances(InstanceIds=sorted(ids))["Reservations"]
                  for i in r["Instances"]]
        return any(s not in ("terminated", "shutting-down") for s in states)

    def _ok(self, tag: str, inner: str) -> tuple[int, list[tuple[str, str]], bytes]:
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<{tag} xmlns="{NS}"><requestId>{uuid.uuid4()}'
                f"</requestId>{inner}</{tag}>")
        return 200, [("Content-Type", "text/xml;charset=UTF-8")], body.encode()


def _local(el: ET.Element) -> str:
    return el.tag.rsplit("}", 1)[-1]


def _text(el: ET.Element, name: str) -> str:
    found = next((c for c in el if _local(c) == name), None)
    return (found.text or "") if found is not None else ""


def _items(el: ET.Element, name: str) -> list[ET.Element]:
    found = next((c for c in el if _local(c) == name), None)
    return [c for c in found if _local(c) == "item"] if found is not None else []
