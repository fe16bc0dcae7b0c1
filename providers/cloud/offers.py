"""The cheapest machine across clouds: which clouds this client has credentials for, and every cloud's
offers for an accelerator ranked by price, from the shipped machine tables (no API call).

`credentials()` says, per cloud, where its credentials were found (or why not) — what `skyhive check`
prints. `rank(...)` lists one `Offer` per (cloud, region): the cheapest machine of that region that has
the accelerator, sorted by the price that will be paid (spot when asked for spot, where the table has a
spot price; on-demand otherwise). `candidates(offers)` builds the providers to try in that order: a
`Fallback` walks down the list, skipping a cloud or region that has no capacity or no quota (and saying why).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base import Provider, ProvisionError
from . import catalog

__all__ = ["CLOUDS", "Offer", "credentials", "rank", "candidates"]

#: the clouds with a machine table, as their providers are registered
CLOUDS = ("aws", "gcp", "azure", "digitalocean")


def credentials() -> dict[str, str | None]:
    """Cloud -> where its credentials were found, or None when none were (nothing is checked online)."""
    found: dict[str, str | None] = {}
    aws_file = Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    found["aws"] = ("AWS_ACCESS_KEY_ID" if os.environ.get("AWS_ACCESS_KEY_ID")
                    else f"AWS_PROFILE {os.environ['AWS_PROFILE']}" if os.environ.get("AWS_PROFILE")
                    else str(aws_file) if aws_file.is_file() else _aws_config_profile())
    from .gce_api import credentials_file

    gcp = credentials_file()
    found["gcp"] = str(gcp) if gcp is not None and gcp.is_file() else None
    from .azure_credentials import cli_login, service_principal

    cli = cli_login()
    found["azure"] = ("AZURE_* (a service principal)" if service_principal() is not None
                      else f"the Azure CLI's login ({cli})" if cli else None)
    found["digitalocean"] = "DIGITALOCEAN_ACCESS_TOKEN" if os.environ.get("DIGITALOCEAN_ACCESS_TOKEN") else None
    return found


#: settings of a profile in ~/.aws/config that give credentials without ~/.aws/credentials (SSO, an
#: assumed role, web identity, a credential process, or keys in the config file itself)
_AWS_CONFIG_KEYS = ("sso_session", "sso_start_url", "credential_process", "role_arn", "web_identity_token_file",
                    "aws_access_key_id")


def _aws_config_profile() -> str | None:
    """Where the default profile of the AWS config file (``AWS_CONFIG_FILE``, else ``~/.aws/config``) gives
    credentials — an SSO-only user has no credentials file — or None (nothing is asked online)."""
    import configparser

    path = Path(os.environ.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config")
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (OSError, configparser.Error):
        return None
    if parser.has_section("default") and any(parser.has_option("default", k) for k in _AWS_CONFIG_KEYS):
        return f"{path} [default]"
    return None


@dataclass(frozen=True, slots=True)
class Offer:
    """The cheapest machine of one cloud's region for a request, and what it costs per hour per node."""

    cloud: str
    region: str
    instance_type: str
    accelerator: str | None
    accelerators: int
    price: float
    spot_price: float | None

    def cost(self, spot: bool) -> float:
        """The price paid per node and hour: spot when asked and known, else on-demand."""
        return self.spot_price if spot and self.spot_price is not None else self.price


def rank(accelerator: str, clouds: Iterable[str], *, spot: bool = False, cpus: float | None = None,
         memory_gb: float | None = None) -> list[Offer]:
    """Every (cloud, region) offer for `accelerator` ("A100", "A100:8"), cheapest first."""
    offers: list[Offer] = []
    for cloud in clouds:
        for region in sorted(catalog._table(cloud)["regions"]):
            try:
                choice = catalog.choose(cloud, region, accelerator=accelerator, cpus=cpus, memory_gb=memory_gb,
                                        spot=spot)
            except ProvisionError:
                continue
            if choice.price_per_hour is None:
                continue
            offers.append(Offer(cloud, region, choice.instance_type, choice.accelerator, choice.accelerators,
                                choice.price_per_hour, choice.spot_price_per_hour))
    return sorted(offers, key=lambda o: (o.cost(spot), o.cloud, o.region))


def candidates(offers: Sequence[Offer]) -> list[Provider]:
    """A provider per offer (its cloud, region and machine fixed), in the offers' order."""
    from ..registry import provider_class

    out: list[Provider] = []
    for offer in offers:
        cls = provider_class(offer.cloud)
        options = cls.resource_options
        kwargs = {options["region"]: offer.region, options["instance_type"]: offer.instance_type}
        out.append(cls(**kwargs))  # type: ignore[call-arg]
    return out


def plan_key(plan: dict, spot: bool) -> float:
    """A provider plan's hourly price for ordering (spot when asked and known); unknown prices last."""
    price = plan.get("spot_price_per_hour") if spot else None
    if not isinstance(price, (int, float)):
        price = plan.get("price_per_hour")
    return float(price) if isinstance(price, (int, float)) else math.inf
