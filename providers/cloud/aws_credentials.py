"""AWS credentials through the standard chain, as every AWS tool finds them: botocore's resolver.

Order (botocore's): the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``);
the profile (`profile=`, else ``AWS_PROFILE``, else "default") in the shared credentials file and the
config file, with its assume-role, SSO, web identity and ``credential_process`` settings; container
credentials; the EC2 instance role. botocore is the ``aws`` extra (``pip install 'skyhive[aws]'``).
Credentials are never recorded: only the profile's name is.

Credentials that expire (SSO, assumed roles, web identity, ``credential_process`` with an
``Expiration``, the instance role) are not read once: `Credentials.source` is a `LiveCredentials`, and
the EC2 connection asks it before every signed call (botocore refreshes them ahead of their expiry,
15 minutes before it when it can, 10 minutes before it at the latest); a call refused because its token
expired anyway (``ExpiredToken``, ``ExpiredTokenException``, ``RequestExpired``: clock skew, a session
revoked) runs the chain again once and is retried (`ec2_driver`). A pool may so outlive the credentials
it started with.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from ..base import ProvisionError

__all__ = ["Credentials", "LiveCredentials", "resolve", "looked_in", "NO_CREDENTIALS", "EXPIRED_CODES"]

log = logging.getLogger("skyhive.providers.aws")

#: the `ProvisionError.code` of "no credentials found"
NO_CREDENTIALS = "NoCredentials"

#: the error codes of a call signed with credentials that have expired (AWS "Common Errors":
#: ExpiredTokenException, 403; EC2's RequestExpired, 400, "can also occur if the credentials have expired";
#: STS-style ExpiredToken)
EXPIRED_CODES = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired"})


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = ""
    token: str | None = None
    method: str = ""  # where botocore found them ("env", "shared-credentials-file", "assume-role", ...)
    source: LiveCredentials | None = field(default=None, compare=False)  # the same, as they are at each call

    def __repr__(self) -> str:  # never the secret
        return f"<Credentials from {self.method or 'unknown'}>"


def _files() -> tuple[str, str]:
    credentials = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials"
    config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    return os.path.expanduser(credentials), os.path.expanduser(config)


def looked_in(profile: str | None) -> list[str]:
    """Every place the chain looks, in order, as a user reads them."""
    credentials, config = _files()
    name = profile or os.environ.get("AWS_PROFILE") or "default"
    via = "profile=" if profile else ("AWS_PROFILE" if os.environ.get("AWS_PROFILE") else "the default profile")
    imds = ("disabled by AWS_EC2_METADATA_DISABLED" if os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true"
            else "169.254.169.254")
    return [
        "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)",
        f"profile {name!r} ({via}) in the shared credentials file {credentials}",
        f"profile {name!r} in the config file {config} (keys, role_arn assume-role, sso_session/sso_* , "
        f"credential_process)",
        "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)",
        "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI)",
        f"the EC2 instance role (instance metadata, {imds})",
    ]


def _chain(profile: str | None) -> Any:
    """botocore's credentials object for `profile` (refreshable where the source expires), or
    `ProvisionError` (code ``NoCredentials``) naming every place it looked and how to fix it."""
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:
        raise ProvisionError("aws: finding credentials needs botocore, the `aws` extra: "
                             "pip install 'skyhive[aws]'", kind="fatal", code=NO_CREDENTIALS) from None
    try:
        session = botocore.session.Session(profile=profile)
        found = session.get_credentials()
    except botocore.exceptions.ProfileNotFound:
        credentials, config = _files()
        raise ProvisionError(f"aws: profile {profile or os.environ.get('AWS_PROFILE')!r} is in neither "
                             f"{credentials} nor {config}", kind="fatal", code=NO_CREDENTIALS) from None
    except botocore.exceptions.BotoCoreError as exc:  # an SSO token expired, a role that cannot be assumed
        raise ProvisionError(f"aws: reading credentials failed: {exc}", kind="fatal", code=NO_CREDENTIALS) from exc
    if found is None:
        places = "; ".join(f"({i}) {p}" for i, p in enumerate(looked_in(profile), 1))
        raise ProvisionError(f"aws: no credentials found. Looked in: {places}. Run `aws configure` (or "
                             f"`aws sso login --profile NAME`), or pass profile=", kind="fatal", code=NO_CREDENTIALS)
    return found


class LiveCredentials:
    """The chain's credentials for one profile as they are now, for signing each call.

    `current()` asks botocore's credentials object, which refreshes itself (runs the
    ``credential_process`` again, renews the SSO role credentials or the assumed role) when they are
    about to expire; `renew()` runs the whole chain again (after a call was refused as expired).
    Thread-safe; never shows a secret."""

    def __init__(self, profile: str | None, found: Any) -> None:
        self.profile = profile
        self._found = found
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<LiveCredentials from {self._found.method or 'unknown'}>"

    def _frozen(self, found: Any) -> tuple[str, str, str | None]:
        try:
            frozen = found.get_frozen_credentials()  # botocore's refresh happens here
        except Exception as exc:  # noqa: BLE001 - a credential_process that fails, an SSO token expired
            method = found.method or "the chain"
            raise ProvisionError(f"aws: refreshing the credentials from {method} failed: {exc} (an SSO login "
                                 f"expired: `aws sso login`)", kind="fatal", code=NO_CREDENTIALS) from exc
        return frozen.access_key, frozen.secret_key, frozen.token or None

    def current(self) -> tuple[str, str, str | None]:
        """(access key, secret key, session token or None), refreshed by botocore when near expiry."""
        with self._lock:
            found = self._found
        return self._frozen(found)

    def renew(self) -> tuple[str, str, str | None]:
        """Run the chain again (the credentials in hand were refused as expired) and return the new ones."""
        found = _chain(self.profile)
        with self._lock:
            self._found = found
        log.info("aws: credentials renewed from %s", found.method or "the chain")
        return self._frozen(found)


def resolve(profile: str | None = None) -> Credentials:
    """The credentials the standard chain finds, or `ProvisionError` (code ``NoCredentials``) naming every
    place it looked and how to fix it. `Credentials.source` gives them as they are at each later call."""
    found = _chain(profile)
    live = LiveCredentials(profile, found)
    access, secret, token = live.current()
    return Credentials(access, secret, token, found.method or "", live)
