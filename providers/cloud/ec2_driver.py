"""libcloud's EC2 driver, corrected in this one place so that it reads real AWS and moto alike.

Three corrections, each measured (see TESTBED.md, "apache-libcloud"), none of them a global monkeypatch:
they live on a driver subclass that only skyhive uses.

1. XML namespace. libcloud looks elements up in ``http://ec2.amazonaws.com/doc/2016-11-15/`` (trailing
   slash). Real AWS answers with it; moto answers some calls without it, and then ``create_node``
   returns ``[]`` and ``list_nodes`` is empty. The response body's EC2 namespace is normalised to the
   slashed form before parsing (a no-op for AWS).
2. Error bodies. AWS sends ``<Response><Errors><Error><Code>…`` un-namespaced; moto namespaces them, and
   libcloud's parser (un-namespaced lookup only) then reports an empty error with no code. Errors are
   parsed here with a namespace-agnostic lookup and raised as `skyhive.CloudAPIError` with the code.
3. Tags and key pairs. libcloud's ``ex_create_tags`` sends a 0-based ``ResourceId.0`` (moto rejects it;
   AWS documents 1-based lists) and ``get_key_pair(name)`` returns the account's first key under moto.
   `create_tags` sends ``ResourceId.1``; `find_key_pair` filters the listing by name.

Instances are tagged at creation (``run_instances`` sends a 1-based TagSpecification,
which both accept). libcloud is imported here and only here for EC2, so importing skyhive does not.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from libcloud.compute.drivers.ec2 import EC2Connection, EC2NodeDriver, EC2Response

from ...errors import CloudAPIError

__all__ = ["SkyhiveEC2Driver", "make_driver", "parse_errors", "normalise_namespace"]

_NS_NO_SLASH = re.compile(r'xmlns="(http://ec2\.amazonaws\.com/doc/\d{4}-\d{2}-\d{2})"')


def normalise_namespace(body: str) -> str:
    """The body with its EC2 XML namespace in the slashed form libcloud looks elements up in."""
    return _NS_NO_SLASH.sub(r'xmlns="\1/"', body, count=1)


def parse_errors(body: str) -> list[tuple[str, str]]:
    """``(code, message)`` of every error in an EC2 error body, namespaced (moto) or not (AWS)."""
    try:
        root = ET.XML(body)
    except ET.ParseError:
        return []
    found = []
    for err in root.iter():
        if err.tag.rsplit("}", 1)[-1] != "Error":
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: (child.text or "") for child in err}
        if "Code" in fields:
            found.append((fields["Code"], fields.get("Message", "")))
    return found


class _Response(EC2Response):
    def parse_body(self) -> Any:
        if isinstance(self.body, str) and self.body:
            self.body = normalise_namespace(self.body)
        return super().parse_body()

    def parse_error(self) -> Any:
        errors = parse_errors(self.body) if isinstance(self.body, str) else []
        if not errors:
            return super().parse_error()
        code, message = errors[0]
        raise CloudAPIError(code, message, int(self.status))


class _Connection(EC2Connection):
    responseCls = _Response


class SkyhiveEC2Driver(EC2NodeDriver):
    """libcloud's EC2 driver with the corrections above (namespace, errors, tags, key pairs)."""

    connectionCls = _Connection

    def create_tags(self, resource_id: str, tags: dict[str, str]) -> None:
        """Tag one resource (1-based list parameters, as AWS documents and moto expects)."""
        params = {"Action": "CreateTags", "ResourceId.1": resource_id}
        for i, (key, value) in enumerate(tags.items(), start=1):
            params[f"Tag.{i}.Key"] = key
            params[f"Tag.{i}.Value"] = value
        self.connection.request(self.path, params=params)

    def find_key_pair(self, name: str) -> Any | None:
        """The key pair called `name`, or None (``get_key_pair`` is wrong under moto)."""
        for pair in self.list_key_pairs():
            if pair.name == name:
                return pair
        return None

    def run_instances(self, params: dict[str, str]) -> list[Any]:
        """One ``RunInstances`` call with exactly these parameters; the instances it made, as libcloud nodes
        (libcloud's ``create_node`` cannot send MetadataOptions, EFA interfaces or a per-call count with a
        ClientToken in one request)."""
        body = self.connection.request(self.path, params={**params, "Action": "RunInstances"}).object
        return list(self._to_nodes(body, "instancesSet/item"))

    def request(self, params: dict[str, str]) -> ET.Element:
        """A raw EC2 API call (for actions libcloud does not wrap); the parsed, namespace-fixed body."""
        return self.connection.request(self.path, params=params).object


def make_driver(
    *, key: str, secret: str, region: str, token: str | None = None, endpoint: str | None = None
) -> SkyhiveEC2Driver:
    """A driver for `region`, signing with SigV4. `endpoint` (``http://127.0.0.1:5000``) points it at
    an EC2-compatible server such as moto_server instead of AWS."""
    kwargs: dict[str, Any] = {"region": region, "signature_version": "4"}
    if token:
        kwargs["token"] = token
    if endpoint:
        match = re.fullmatch(r"(https?)://([^:/]+)(?::(\d+))?/?", endpoint)
        if match is None:
            raise ValueError(f"endpoint must look like http://HOST:PORT, not {endpoint!r}")
        scheme, host, port = match.groups()
        kwargs.update(host=host, secure=scheme == "https", port=int(port) if port else (443 if scheme == "https" else 80))
    return SkyhiveEC2Driver(key, secret, **kwargs)
