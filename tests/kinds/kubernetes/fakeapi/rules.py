"""FAKE Kubernetes API server (a test stand-in, not a cluster): what it refuses, rule by rule, each citing the
page of the Kubernetes reference that says the real API server refuses it; and the `Status` object every
error is answered with.

- Object names (a pod's `metadata.name`): a DNS subdomain — at most 253 characters, lower-case letters,
  digits, '-' and '.', starting and ending with a letter or digit.
  https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names
- Container names: a DNS label (RFC 1123) — at most 63 characters, lower-case letters, digits and '-'.
  https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names
- Label keys ([prefix/]name: name at most 63, alphanumerics with '-', '_', '.' inside; prefix a DNS
  subdomain) and label values (empty, or at most 63 such characters beginning and ending alphanumeric).
  https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set
- Quantities (`resources.requests/limits`): `<signedNumber><suffix>`, suffix one of Ki Mi Gi Ti Pi Ei,
  m k M G T P E, or an exponent; no negative resource.
  https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
- Extended resources (a name outside *.kubernetes.io, e.g. nvidia.com/gpu) are whole numbers, cannot be
  overcommitted: a request must equal its limit, and a request without a limit is refused (GPUs are
  asked in `limits`; the request defaults to it).
  https://kubernetes.io/docs/tasks/configure-pod-container/extended-resource/ ,
  https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources ,
  https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/
- A request above its limit is refused.
  https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#requests-and-limits
- Every error is a `Status` (kind Status, apiVersion v1, status Failure, message, reason, details, code):
  AlreadyExists 409 (a name taken in the namespace), NotFound 404, Invalid 422 (details.causes name the
  field), BadRequest 400, Unauthorized 401, Expired/Gone 410 (a watch from a compacted resourceVersion).
  https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/ ,
  https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["Refused", "status", "validate_pod", "parse_quantity", "STATUS_REASONS"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Decimal("0.001"), "": Decimal(1), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
            "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
#: the resources a container may name that are not extended ones
STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})

#: HTTP code of each Status reason the fake answers with (the Status page's StatusReason list)
STATUS_REASONS = {"AlreadyExists": 409, "NotFound": 404, "Invalid": 422, "BadRequest": 400, "Unauthorized": 401,
                  "Expired": 410, "MethodNotAllowed": 405}


class Refused(Exception):
    """The fake refuses a request: `status()` is the body, `code` the HTTP code."""

    def __init__(self, reason: str, message: str, *, kind: str = "pods", name: str = "",
                 causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = STATUS_REASONS[reason]
        self.body = status(reason, message, kind=kind, name=name, causes=causes)


def status(reason: str, message: str, *, kind: str = "pods", name: str = "",
           causes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The `Status` object the API server answers an error with."""
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if causes:
        details["causes"] = causes
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details, "code": STATUS_REASONS[reason]}


def parse_quantity(text: Any) -> Decimal:
    """The value of a quantity string (or a JSON number); raises `ValueError` saying what is wrong."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return Decimal(str(text))
    if not isinstance(text, str):
        raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    sign, number, suffix = m.group(1), m.group(2), m.group(3) or ""
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a number") from None
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        value *= Decimal(10) ** int(suffix[1:])
    return -value if sign == "-" else value


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "a label key's prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character (max 63)")
    return None


def _label_value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "a label value must be a string"
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character (max 63)")
    return None


def _resources(path: str, resources: dict[str, Any], causes: list[dict[str, str]]) -> None:
    parsed: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for part in ("requests", "limits"):
        for name, raw in (resources.get(part) or {}).items():
            field = f"{path}.resources.{part}[{name}]"
            try:
                value = parse_quantity(raw)
            except ValueError as exc:
                causes.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {raw!r}: {exc}", "field": field})
                continue
            if value < 0:
                causes.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {raw!r}: must be greater than "
                               "or equal to 0", "field": field})
            if name not in STANDARD_RESOURCES and value != value.to_integral_value():
                causes.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {raw!r}: must be an integer",
                               "field": field})
            parsed[part][name] = value
    for name, req in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        field = f"{path}.resources.requests[{name}]"
        if name not in STANDARD_RESOURCES:
            if limit is None:
                causes.append({"reason": "FieldValueRequired", "field": f"{path}.resources.limits[{name}]",
                               "message": "Required value: Limit must be set for non overcommitable resources"})
            elif req != limit:
                causes.append({"reason": "FieldValueInvalid", "field": field, "message": f"Invalid value: "
                               f"{resources['requests'][name]!r}: must be equal to {name} limit of {resources['limits'][name]}"})
        elif limit is not None and req > limit:
            causes.append({"reason": "FieldValueInvalid", "field": field, "message": f"Invalid value: "
                           f"{resources['requests'][name]!r}: must be less than or equal to {name} limit of "
                           f"{resources['limits'][name]}"})


def validate_pod(pod: dict[str, Any]) -> None:
    """Refuse a pod the real API server refuses (the rules of the module docstring): `Refused` (Invalid,
    422) with one cause per field, as the real server lists them."""
    meta = pod.get("metadata") or {}
    name = meta.get("name") or ""
    causes: list[dict[str, str]] = []
    if not name:
        causes.append({"reason": "FieldValueRequired", "message": "Required value: name or generateName is required",
                       "field": "metadata.name"})
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append({"reason": "FieldValueInvalid", "field": "metadata.name", "message": f"Invalid value: {name!r}: "
                       "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                       "'.', and must start and end with an alphanumeric character"})
    for key, value in (meta.get("labels") or {}).items():
        problem = _label_key_problem(key)
        if problem:
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.labels",
                           "message": f"Invalid value: {key!r}: {problem}"})
        problem = _label_value_problem(value)
        if problem:
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.labels",
                           "message": f"Invalid value: {value!r}: {problem}"})
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"})
    for i, c in enumerate(containers):
        path = f"spec.containers[{i}]"
        cname = c.get("name") or ""
        if not cname or len(cname) > 63 or not _DNS_LABEL.match(cname):
            causes.append({"reason": "FieldValueInvalid", "field": f"{path}.name", "message": f"Invalid value: "
                           f"{cname!r}: a lowercase RFC 1123 label must consist of lower case alphanumeric "
                           "characters or '-', and must start and end with an alphanumeric character"})
        if not c.get("image"):
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": f"{path}.image"})
        _resources(path, c.get("resources") or {}, causes)
    for key, value in (spec.get("nodeSelector") or {}).items():
        problem = _label_key_problem(key) or _label_value_problem(value)
        if problem:
            causes.append({"reason": "FieldValueInvalid", "field": "spec.nodeSelector",
                           "message": f"Invalid value: {value!r}: {problem}"})
    if causes:
        summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        raise Refused("Invalid", f'Pod "{name}" is invalid: {summary}', name=name, causes=causes)
