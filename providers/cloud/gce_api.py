"""Google Compute Engine's REST API, the few calls `sky.GCP` makes, and Google's application-default credentials.

libcloud's GCE driver cannot express what a GPU machine needs on GCE today (image families of public
projects, ``provisioningModel: SPOT``, attached accelerators with ``onHostMaintenance: TERMINATE``) nor
read the credentials ``gcloud auth application-default login`` writes, so `sky.GCP` speaks the
``compute/v1`` REST API itself, over `requests` (which libcloud uses too).

Credentials, in the order Google's client libraries look for them (application-default credentials):
the JSON file named by ``GOOGLE_APPLICATION_CREDENTIALS``, else gcloud's
``application_default_credentials.json`` (in ``$CLOUDSDK_CONFIG`` or ``~/.config/gcloud``). Two kinds of
file are understood: ``service_account`` (a key: a JWT signed with it is exchanged for a token, RFC 7523)
and ``authorized_user`` (a user's refresh token, exchanged at the token endpoint, RFC 6749 §6). The
project is `GCP(project=...)`, else ``GOOGLE_CLOUD_PROJECT``/``CLOUDSDK_CORE_PROJECT``, else the
file's ``project_id``/``quota_project_id``.

Errors: every error answer becomes a `CloudAPIError` whose `code` is GCE's ``reason`` (``notFound``,
``quotaExceeded``, …) or, for a failed operation, its error ``code`` (``ZONE_RESOURCE_POOL_EXHAUSTED``).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ...errors import CloudAPIError
from ..base import ProvisionError

__all__ = ["GCECredentials", "GCEClient", "credentials_file", "COMPUTE", "TOKEN_URI"]

COMPUTE = "https://compute.googleapis.com/compute/v1"
TOKEN_URI = "https://oauth2.googleapis.com/token"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def credentials_file() -> Path | None:
    """The application-default credentials file, or None when there is none."""
    named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if named:
        return Path(named)
    config = os.environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    path = Path(config) / "application_default_credentials.json"
    return path if path.is_file() else None


class GCECredentials:
    """An access token from application-default credentials, refreshed a minute before it expires."""

    def __init__(self, info: dict[str, Any], where: str) -> None:
        self.kind = info.get("type")
        if self.kind not in ("service_account", "authorized_user"):
            raise ProvisionError(f"gcp: {where}: credentials of type {self.kind!r} are not supported "
                                 "(a service account key or `gcloud auth application-default login`)", kind="fatal")
        needed = (("client_email", "private_key") if self.kind == "service_account"
                  else ("client_id", "client_secret", "refresh_token"))
        missing = [k for k in needed if not info.get(k)]
        if missing:
            raise ProvisionError(f"gcp: {where}: a {self.kind} credentials file without {', '.join(missing)}",
                                 kind="fatal")
        self.info, self.where = info, where
        self.project = info.get("project_id") or info.get("quota_project_id")
        self._token: tuple[str, float] | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls) -> GCECredentials:
        path = credentials_file()
        if path is None:
            raise ProvisionError("gcp: no credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service account "
                                 "key file, or run `gcloud auth application-default login`", kind="fatal")
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ProvisionError(f"gcp: cannot read credentials file {path}: {exc}", kind="fatal") from None
        return cls(info, str(path))

    def token(self, session: Any) -> str:
        with self._lock:
            if self._token is None or self._token[1] - 60 < time.time():
                answer = session.post(self.info.get("token_uri") or TOKEN_URI, data=self._grant(), timeout=30)
                if answer.status_code != 200:
                    raise ProvisionError(f"gcp: {self.where}: the token endpoint refused the credentials "
                                         f"({answer.status_code}: {answer.text[:200]})", kind="fatal")
                body = answer.json()
                self._token = (body["access_token"], time.time() + float(body.get("expires_in", 3600)))
            return self._token[0]

    def _grant(self) -> dict[str, str]:
        if self.kind == "authorized_user":
            return {"grant_type": "refresh_token", "client_id": self.info["client_id"],
                    "client_secret": self.info["client_secret"], "refresh_token": self.info["refresh_token"]}
        return {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": self._assertion()}

    def _assertion(self) -> str:
        """A JWT (RS256) signed with the service account's key, asking for the cloud-platform scope."""
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.info.get("private_key_id", "")}
        claims = {"iss": self.info["client_email"], "scope": SCOPE, "aud": self.info.get("token_uri") or TOKEN_URI,
                  "iat": now, "exp": now + 3600}
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        key = serialization.load_pem_private_key(self.info["private_key"].encode(), password=None)
        signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
        return f"{signing_input}.{b64(signature)}"


class GCEClient:
    """``compute/v1`` calls for one project; zonal operations are waited for until DONE."""

    def __init__(self, project: str, credentials: GCECredentials, *, poll: float = 2.0,
                 operation_timeout: float = 600.0) -> None:
        import requests

        self.project, self.credentials = project, credentials
        self.session = requests.Session()
        self.poll, self.operation_timeout = poll, operation_timeout

    def url(self, path: str) -> str:
        return path if path.startswith("https://") else f"{COMPUTE}/projects/{self.project}/{path.lstrip('/')}"

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                params: dict[str, str] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.credentials.token(self.session)}"}
        answer = self.session.request(method, self.url(path), json=body, params=params, headers=headers, timeout=60)
        if answer.status_code >= 400:
            raise _error(answer.status_code, answer.text, f"{method} {path}")
        return answer.json() if answer.content else {}

    def wait(self, operation: dict[str, Any]) -> dict[str, Any]:
        """Poll a (zonal or global) operation until DONE; its error is raised as a `CloudAPIError`."""
        deadline = time.monotonic() + self.operation_timeout
        while operation.get("status") != "DONE":
            if time.monotonic() > deadline:
                raise CloudAPIError("operationTimeout", f"operation {operation.get('name')} not done after "
                                    f"{self.operation_timeout:.0f} s", 504)
            time.sleep(self.poll)
            operation = self.request("GET", operation["selfLink"])
        errors = (operation.get("error") or {}).get("errors") or []
        if errors:
            first = errors[0]
            raise CloudAPIError(first.get("code", "operationFailed"),
                                f"{operation.get('operationType', 'operation')} {operation.get('targetLink', '')}: "
                                f"{first.get('message', '')}", int(operation.get("httpErrorStatusCode") or 400))
        return operation


def _error(status: int, text: str, what: str) -> CloudAPIError:
    try:
        error = json.loads(text).get("error") or {}
    except ValueError:
        error = {}
    details = error.get("errors") or [{}]
    code = details[0].get("reason") or error.get("status") or f"http{status}"
    return CloudAPIError(code, f"{what}: {error.get('message') or text[:200]}", status)
