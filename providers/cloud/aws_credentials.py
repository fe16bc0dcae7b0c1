"""AWS credentials through the standard chain, as every AWS tool finds them: botocore's resolver.

Order (botocore's): the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``);
the profile (`profile=`, else ``AWS_PROFILE``, else "default") in the shared credentials file and the
config file, with its assume-role, SSO, web identity and ``credential_process`` settings; container
credentials; the EC2 instance role. botocore is the ``aws`` extra (``pip install 'skyhive[aws]'``).
Credentials are never recorded: only the profile's name is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..base import ProvisionError

__all__ = ["Credentials", "resolve", "looked_in", "NO_CREDENTIALS"]

#: the `ProvisionError.code` of "no credentials found"
NO_CREDENTIALS = "NoCredentials"


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = ""
    token: str | None = None
    method: str = ""  # where botocore found them ("env", "shared-credentials-file", "assume-role", ...)

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


def resolve(profile: str | None = None) -> Credentials:
    """The credentials the standard chain finds, or `ProvisionError` (code ``NoCredentials``) naming every
    place it looked and how to fix it."""
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
    frozen = found.get_frozen_credentials()
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None, getattr(found, "method", ""))
