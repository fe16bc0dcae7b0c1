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

Credentials that expire: a driver made with a `CredentialSource` signs every call with what the source
says now (botocore refreshes expiring credentials ahead of time), and a call refused as expired
(``ExpiredToken``/``ExpiredTokenException``/``RequestExpired``) is retried once after `renew()`.

Instances are tagged at creation (``run_instances`` sends a 1-based TagSpecification,
which both accept). libcloud is imported here and only here for EC2, so importing skyhive does not.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from typing import Any, Protocol

from libcloud.compute.drivers.ec2 import EC2Connection, EC2NodeDriver, EC2Response

from ...errors import CloudAPIError
from .aws_credentials import EXPIRED_CODES

__all__ = ["SkyhiveEC2Driver", "CredentialSource", "make_driver", "parse_errors", "normalise_namespace",
           "EXPIRED_CODES"]

log = logging.getLogger("skyhive.providers.aws")


class CredentialSource(Protocol):
    """Credentials as they are at the moment of a call: (access key, secret key, session token or None)."""

    def current(self) -> tuple[str, str, str | None]:
        """The credentials to sign the next call with (refreshed when about to expire)."""
        ...

    def renew(self) -> tuple[str, str, str | None]:
        """Fresh credentials after a call was refused as expired."""
        ...

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
    credentials: CredentialSource | None = None  # set by `make_driver`; None: the keys given, for ever

    def _sign_with(self, keys: tuple[str, str, str | None]) -> None:
        access, secret, token = keys
        self.user_id, self.key, self.token = access, secret, token
        self.signer.access_key, self.signer.access_secret = access, secret

    def request(self, action: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        """libcloud's request, signed with the credentials of this moment; retried once with renewed
        ones when AWS says they expired."""
        if self.credentials is None:
            return super().request(action, params, *args, **kwargs)
        self._sign_with(self.credentials.current())
        try:
            return super().request(action, dict(params or {}), *args, **kwargs)
        except CloudAPIError as exc:
            if exc.code not in EXPIRED_CODES:
                raise
            log.info("aws: %s with key %s…: %s; renewing the credentials and retrying once", (params or {}).get(
                "Action", action), self.user_id[:4], exc.code)
            self._sign_with(self.credentials.renew())
            return super().request(action, dict(params or {}), *args, **kwargs)


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

    def list_instances(self, filters: dict[str, Any]) -> list[Any]:
        """DescribeInstances with `filters` (name -> value or list of values), as libcloud nodes: one call
        (libcloud's ``list_nodes`` adds a DescribeAddresses to merge Elastic IPs into the public
        addresses, which EC2 already reports as the instance's ``ipAddress``)."""
        params = {"Action": "DescribeInstances"}
        for i, (name, values) in enumerate(filters.items(), 1):
            params[f"Filter.{i}.Name"] = name
            for j, value in enumerate([values] if isinstance(values, str) else list(values), 1):
                params[f"Filter.{i}.Value.{j}"] = str(value)
        body = self.connection.request(self.path, params=params).object
        nodes = []
        for el in body.iter():
            if el.tag.rsplit("}", 1)[-1] == "reservationSet":
                for reservation in el:
                    nodes += self._to_nodes(reservation, "instancesSet/item")
        return nodes

    def request(self, params: dict[str, str]) -> ET.Element:
        """A raw EC2 API call (for actions libcloud does not wrap); the parsed, namespace-fixed body."""
        return self.connection.request(self.path, params=params).object


def make_driver(
    *, key: str, secret: str, region: str, token: str | None = None, endpoint: str | None = None,
    credentials: CredentialSource | None = None,
) -> SkyhiveEC2Driver:
    """A driver for `region`, signing with SigV4. `endpoint` (``http://127.0.0.1:5000``) points it at
    an EC2-compatible server such as moto_server instead of AWS. `credentials`: where each call's keys
    come from (they may expire); `key`/`secret`/`token` are then only the first ones."""
    kwargs: dict[str, Any] = {"region": region, "signature_version": "4"}
    if token:
        kwargs["token"] = token
    if endpoint:
        match = re.fullmatch(r"(https?)://([^:/]+)(?::(\d+))?/?", endpoint)
        if match is None:
            raise ValueError(f"endpoint must look like http://HOST:PORT, not {endpoint!r}")
        scheme, host, port = match.groups()
        kwargs.update(host=host, secure=scheme == "https", port=int(port) if port else (443 if scheme == "https" else 80))
    driver = SkyhiveEC2Driver(key, secret, **kwargs)
    driver.connection.credentials = credentials
    return driver
