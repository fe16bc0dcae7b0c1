"""Azure credentials the way `azure-identity`'s default chain finds them, for `sky.Azure`.

Tried in order; the first that gives a token is used (none is recorded: a token is asked for again a few
minutes before it expires):

1. A service principal in the environment: ``AZURE_TENANT_ID``, ``AZURE_CLIENT_ID``,
   ``AZURE_CLIENT_SECRET`` (libcloud's ARM connection exchanges them itself: `service_principal`).
2. The Azure CLI's login (``az login``): ``az account get-access-token --resource
   https://management.azure.com/ --output json``, which reads and refreshes the CLI's own token cache; the
   subscription is ``AZURE_SUBSCRIPTION_ID``, else the one the CLI answers with (its default).
3. A managed identity (a VM's, or ``AZURE_CLIENT_ID``'s user-assigned one): the instance metadata service's
   token endpoint (``http://169.254.169.254/metadata/identity/oauth2/token``, header ``Metadata: true``,
   https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token),
   asked with a short timeout; the subscription must then be in ``AZURE_SUBSCRIPTION_ID``.

The CLI is asked before the metadata service so that a laptop with a CLI login never waits on an address
that only an Azure VM answers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from ..base import ProvisionError

__all__ = ["TokenSource", "SP_VARIABLES", "service_principal", "token_source", "cli_login"]

log = logging.getLogger(__name__)

RESOURCE = "https://management.azure.com/"
IMDS = "http://169.254.169.254/metadata/identity/oauth2/token"
SP_VARIABLES = ("AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET")


@dataclass(frozen=True)
class TokenSource:
    """Where tokens come from (`where`, for messages), the subscription, and `fetch()` -> (token, expires_on)."""

    where: str
    subscription: str
    tenant: str
    fetch: Callable[[], tuple[str, float]]


def service_principal() -> list[str] | None:
    """The four service-principal variables' values, when all are set."""
    values = [os.environ.get(n) or "" for n in SP_VARIABLES]
    return values if all(values) else None


def cli_login() -> str | None:
    """Where the Azure CLI keeps its login, when `az` is on PATH and has one (no call made): its profile."""
    config = os.environ.get("AZURE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".azure")
    profile = os.path.join(config, "azureProfile.json")
    return profile if shutil.which("az") and os.path.isfile(profile) else None


def _cli_token() -> dict:
    az = shutil.which("az")
    if az is None:
        raise FileNotFoundError("az")
    done = subprocess.run([az, "account", "get-access-token", "--resource", RESOURCE, "--output", "json"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ProvisionError(f"azure: `az account get-access-token` failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()[:300]}; run `az login`", kind="fatal")
    return json.loads(done.stdout)


def _expiry(answer: dict) -> float:
    if answer.get("expires_on"):
        return float(answer["expires_on"])
    if answer.get("expiresOn"):  # older CLIs: local time, "2026-12-07 13:00:00.000000"
        from datetime import datetime

        return datetime.strptime(str(answer["expiresOn"])[:19], "%Y-%m-%d %H:%M:%S").timestamp()
    return time.time() + 300


def _imds_token() -> tuple[str, float]:
    import requests

    params = {"api-version": "2018-02-01", "resource": RESOURCE}
    if os.environ.get("AZURE_CLIENT_ID"):
        params["client_id"] = os.environ["AZURE_CLIENT_ID"]
    answer = requests.get(IMDS, params=params, headers={"Metadata": "true"}, timeout=2)
    if answer.status_code != 200:
        raise ProvisionError(f"azure: the managed identity endpoint answered {answer.status_code}: "
                             f"{answer.text[:200]}", kind="fatal")
    body = answer.json()
    return body["access_token"], float(body.get("expires_on") or time.time() + 300)


def token_source() -> TokenSource:
    """The Azure CLI's login, else a managed identity (see the module docstring; the service principal is
    libcloud's own). Raises `ProvisionError` (fatal) saying what was tried."""
    subscription = os.environ.get("AZURE_SUBSCRIPTION_ID") or ""
    tried = []
    if shutil.which("az"):
        try:
            first = _cli_token()
        except (OSError, ValueError, subprocess.TimeoutExpired, ProvisionError) as exc:
            tried.append(f"the Azure CLI ({exc})")
        else:
            cached = [first]

            def from_cli() -> tuple[str, float]:
                answer = cached.pop() if cached else _cli_token()
                return str(answer["accessToken"]), _expiry(answer)

            return TokenSource("the Azure CLI's login (az account get-access-token)",
                               subscription or str(first.get("subscription") or ""),
                               str(first.get("tenant") or os.environ.get("AZURE_TENANT_ID") or "common"), from_cli)
    else:
        tried.append("the Azure CLI (no `az` on PATH)")
    try:
        token = _imds_token()
    except Exception as exc:  # off Azure: no such address, refused, timed out
        tried.append(f"a managed identity ({type(exc).__name__}: {str(exc)[:120]})")
    else:
        if not subscription:
            raise ProvisionError("azure: a managed identity was found; set AZURE_SUBSCRIPTION_ID to the "
                                 "subscription to use", kind="fatal")
        cached_token = [token]
        return TokenSource("a managed identity", subscription, os.environ.get("AZURE_TENANT_ID") or "common",
                           lambda: cached_token.pop() if cached_token else _imds_token())
    raise ProvisionError("azure: no credentials: set AZURE_TENANT_ID, AZURE_SUBSCRIPTION_ID, AZURE_CLIENT_ID and "
                         "AZURE_CLIENT_SECRET (a service principal), or run `az login`; tried: " + "; ".join(tried),
                         kind="fatal")
