"""Where an AWS pool's nodes live on the network: the VPC and a subnet per zone, the pool's security
group, its cluster placement group, and the client's address that may SSH in.

- `vpc=` names the VPC; otherwise the region's default VPC. An account with no default VPC (common in
  company accounts, and after deleting it) needs `vpc=` or `subnet=`/`subnets=`, and the error says so.
- `subnet=`/`subnets=`: the subnets to launch in (at most one per zone); the zones tried are theirs.
  Otherwise each zone's subnet in the VPC (its default-for-az subnet first); in a VPC named by `vpc=` (a
  company's; the default VPC is public by construction) among the **public** ones: a
  subnet whose route table sends ``0.0.0.0/0`` to an internet gateway (``igw-``), the table being the one
  explicitly associated with the subnet, else the VPC's main table (Amazon VPC User Guide, "Configure
  route tables" and "Subnet route tables": https://docs.aws.amazon.com/vpc/latest/userguide/VPC_Route_Tables.html;
  DescribeRouteTables: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeRouteTables.html).
  A node in a private subnet has no way in for SSH from the client (it used to time out after 300 s). A zone
  with no subnet, or only private ones, is skipped and named (with the private subnets' ids), not fatal;
  route tables that cannot be read (a policy without ec2:DescribeRouteTables) leave every subnet a
  candidate, with a warning.
- The pool's group lets the client's address (`ssh_cidr`) in on port 22 and the pool's nodes reach each
  other on everything; EFA also needs the group to allow all traffic *out* to itself (EC2 User Guide,
  "Prepare an EFA-enabled security group"), which is added for EFA pools.
- A multi-node GPU pool gets a cluster placement group ``skyhive-<pool>``, tagged, deleted with the pool.
"""

from __future__ import annotations

import logging
from typing import Any

from ..base import ProvisionError
from .aws_data import POOL_TAG
from .base import ErrorKind

#: the provider (`aws.AWS`): typed loosely, as this module is imported by it
AWS = Any

__all__ = ["AWSNetwork", "public_address"]

log = logging.getLogger(__name__)

CHECKIP_URL = "https://checkip.amazonaws.com"


def public_address(url: str = CHECKIP_URL, timeout: float = 10.0) -> str:
    """This client's public IPv4 address as AWS sees it; a ProvisionError naming `ssh_cidr=` if the lookup
    fails (no route, a proxy, a DNS failure)."""
    import ipaddress
    from urllib.request import urlopen

    try:
        with urlopen(url, timeout=timeout) as resp:  # noqa: S310 - a fixed https URL
            text = resp.read().decode().strip()
        ipaddress.IPv4Address(text)
    except Exception as exc:
        raise ProvisionError(f"aws: cannot find this client's public address to let it SSH in (asked {url}: {exc}); "
                             f"pass ssh_cidr= (e.g. ssh_cidr='203.0.113.7/32', or your office's range)",
                             kind="fatal") from exc
    return text + "/32"


def _local(el: Any) -> str:
    return str(el.tag).rsplit("}", 1)[-1]


def _items(el: Any, set_name: str) -> list[Any]:
    """The ``item`` children of `el`'s direct child `set_name` (EC2's XML lists)."""
    return [item for child in el if _local(child) == set_name for item in child if _local(item) == "item"]


def _text(el: Any, name: str) -> str:
    return next((str(c.text or "") for c in el if _local(c) == name), "")


class AWSNetwork:
    """The network side of one `AWS` provider (blocking calls, run in its worker threads)."""

    def __init__(self, aws: AWS) -> None:
        self.aws = aws
        self._vpc: str | None = None
        self._subnets: dict[str, str] | None = None  # zone -> subnet id
        self._private: dict[str, list[str]] = {}  # zone -> its subnets with no route to an internet gateway
        self._default_vpc = False  # the VPC is the region's default one (taken when no vpc=/subnets= is given)
        self._made: dict[str, str] = {}  # pool -> the group id this process made for it

    @property
    def driver(self) -> Any:
        return self.aws.driver

    def _call(self, what: str, fn: Any, *, just_made: bool = False) -> Any:
        return self.aws._retrying(what, fn, just_made=just_made)

    # ---- VPC and subnets -------------------------------------------------------------------------------

    def vpc(self) -> str:
        if self._vpc is None:
            if self.aws.vpc:
                self._vpc = self.aws.vpc
            elif self.aws.subnets:
                subnets = self._call("DescribeSubnets", lambda: self.driver.ex_list_subnets(
                    subnet_ids=list(self.aws.subnets or ())))
                vpcs = sorted({s.extra.get("vpc_id") for s in subnets})
                if len(vpcs) != 1:
                    raise ProvisionError(f"aws: subnets {self.aws.subnets} are in VPCs {vpcs}: give subnets of one "
                                         f"VPC", kind="fatal")
                self._vpc = str(vpcs[0])
            else:
                nets = self._call("DescribeVpcs", lambda: self.driver.ex_list_networks())
                default = [n.id for n in nets if str(n.extra.get("is_default")).lower() == "true"]
                if not default:
                    raise ProvisionError(f"aws: region {self.aws.region} has no default VPC (company accounts often "
                                         f"delete it): pass vpc='vpc-...' or subnet='subnet-...'", kind="fatal")
                self._vpc, self._default_vpc = default[0], True
        return self._vpc

    def subnets(self) -> dict[str, str]:
        """zone -> the subnet nodes launch in there."""
        if self._subnets is None:
            if self.aws.subnets:
                found = self._call("DescribeSubnets", lambda: self.driver.ex_list_subnets(
                    subnet_ids=list(self.aws.subnets or ())))
                by_id = {s.id: s for s in found}
                unknown = [s for s in self.aws.subnets if s not in by_id]
                if unknown:
                    raise ProvisionError(f"aws: subnets {unknown} not found in {self.aws.region}", kind="fatal")
                chosen: dict[str, str] = {}
                for sid in self.aws.subnets:
                    zone = by_id[sid].extra.get("zone")
                    if zone in chosen:
                        raise ProvisionError(f"aws: subnets {chosen[zone]} and {sid} are both in {zone}: give one per "
                                             f"zone", kind="fatal")
                    chosen[zone] = sid
                self._subnets = chosen
            else:
                vpc = self.vpc()
                found = self._call("DescribeSubnets", lambda: self.driver.ex_list_subnets(filters={"vpc-id": vpc}))
                # the default VPC is public by construction (an internet gateway, and 0.0.0.0/0 to it in its
                # main table: https://docs.aws.amazon.com/vpc/latest/userguide/default-vpc.html); moto's has
                # neither, so it is not checked
                public = None if self._default_vpc else self._public_subnets(vpc, [s.id for s in found])
                chosen, private = {}, {}
                for s in sorted(found, key=lambda s: (str(s.extra.get("default_for_az")).lower() != "true", s.id)):
                    if public is not None and s.id not in public:
                        private.setdefault(s.extra.get("zone"), []).append(s.id)
                    else:
                        chosen.setdefault(s.extra.get("zone"), s.id)
                self._private = {zone: ids for zone, ids in private.items() if zone not in chosen}
                self._subnets = chosen
        return self._subnets

    def _public_subnets(self, vpc: str, subnets: list[str]) -> set[str] | None:
        """Those of `subnets` (of `vpc`) whose route table has ``0.0.0.0/0`` to an internet gateway (an explicitly
        associated table, else the main one); None when the route tables cannot be read."""
        try:
            body = self._call("DescribeRouteTables", lambda: self.driver.request({
                "Action": "DescribeRouteTables", "Filter.1.Name": "vpc-id", "Filter.1.Value.1": vpc}))
        except Exception as exc:  # a policy without ec2:DescribeRouteTables: the subnets as before
            log.warning("aws: cannot read the route tables of %s (%s): a subnet without a route to an internet "
                        "gateway may be chosen; pass subnet=/subnets= to choose", vpc, exc)
            return None
        explicit: dict[str, bool] = {}  # subnet -> its table reaches an internet gateway
        main = False
        for table in _items(body, "routeTableSet"):
            reaches = any(_text(r, "destinationCidrBlock") == "0.0.0.0/0" and _text(r, "gatewayId").startswith("igw-")
                          and _text(r, "state") in ("", "active") for r in _items(table, "routeSet"))
            for assoc in _items(table, "associationSet"):
                if _text(assoc, "main") == "true":
                    main = reaches
                elif _text(assoc, "subnetId"):
                    explicit[_text(assoc, "subnetId")] = reaches
        return {sid for sid in subnets if explicit.get(sid, main)}

    def usable_zones(self, offered: list[str]) -> tuple[list[str], list[str]]:
        """(zones to try, in `offered`'s order, that have a subnet; "zone (why)" of those skipped). With
        explicit subnets, their zones that offer the type."""
        subnets = self.subnets()
        usable = [z for z in offered if z in subnets]
        skipped = [f"{z} (no subnet in {self.vpc() if not self.aws.subnets else 'subnets='})" if z not in self._private
                   else f"{z} (its subnets {', '.join(self._private[z])} have no route to an internet gateway)"
                   for z in offered if z not in subnets]
        if self.aws.subnets:
            skipped += [f"{z} (subnet {sid}: the type is not offered there)" for z, sid in subnets.items()
                        if z not in offered]
        return usable, skipped

    def subnet(self, zone: str) -> str:
        subnet = self.subnets().get(zone)
        if subnet is None:
            raise ProvisionError(f"aws: no subnet in {zone}", kind="fatal")
        return subnet

    # ---- the pool's security group ---------------------------------------------------------------------

    def owned_groups(self, pool_id: str) -> list[str]:
        groups = self._call("DescribeSecurityGroups", lambda: self.driver.ex_get_security_groups(
            filters={f"tag:{POOL_TAG}": pool_id}))
        return [g.id for g in groups]

    def ssh_cidr(self) -> str:
        if self.aws.ssh_cidr:
            return self.aws.ssh_cidr
        if self.aws.endpoint:
            return "127.0.0.1/32"
        return public_address()

    def pool_group(self, pool_id: str, *, efa: bool) -> str:
        """The pool's own group (made, or found again by tag when EC2 says it exists): SSH from the client,
        all traffic within."""
        cidr = self.ssh_cidr()  # before anything is made: a failed lookup leaves nothing behind
        vpc = self.vpc()
        try:  # made without a listing first: a group of that name in the VPC is told by EC2 (Duplicate)
            created = self._call("CreateSecurityGroup", lambda: self.driver.request({
                "Action": "CreateSecurityGroup", "GroupName": f"skyhive-{pool_id}", "VpcId": vpc,
                "GroupDescription": f"skyhive pool {pool_id}: SSH from the client, all traffic within the pool",
                **self.aws._tags(pool_id, "security-group")}))
        except Exception as exc:
            if self.aws.error_code(exc) != "InvalidGroup.Duplicate":
                raise
            owned = self.owned_groups(pool_id)
            if not owned:
                raise ProvisionError(f"aws: a security group named skyhive-{pool_id} exists in {vpc} without the "
                                     f"tag {POOL_TAG}={pool_id}: not this pool's; delete it or use another pool name",
                                     kind="fatal") from exc
            # found again (a retry whose first answer was lost, another process): its rules are asked for
            # again below, EC2 answering InvalidPermission.Duplicate for those it has
            self._made.pop(pool_id, None)
            group_id = owned[0]
        else:
            group_id = next(el.text for el in created.iter() if el.tag.endswith("}groupId"))
            self._made[pool_id] = group_id
        self._rules(group_id, cidr, efa=efa)
        return group_id

    def _rules(self, group_id: str, cidr: str, *, efa: bool) -> None:
        """The pool group's rules; one that is there already (InvalidPermission.Duplicate) is fine."""
        def once(what: str, fn: Any) -> None:
            try:
                self._call(what, fn, just_made=True)
            except Exception as exc:
                if self.aws.error_code(exc) != "InvalidPermission.Duplicate":
                    raise

        once("AuthorizeSecurityGroupIngress", lambda: self.driver.ex_authorize_security_group_ingress(
            group_id, 22, 22, cidr_ips=[cidr], protocol="tcp"))
        once("AuthorizeSecurityGroupIngress", lambda: self.driver.ex_authorize_security_group_ingress(
            group_id, 0, 65535, group_pairs=[{"group_id": group_id}], protocol="-1"))
        if efa:  # EFA traffic must also be allowed out to the group itself
            once("AuthorizeSecurityGroupEgress", lambda: self.driver.request({
                "Action": "AuthorizeSecurityGroupEgress", "GroupId": group_id,
                "IpPermissions.1.IpProtocol": "-1", "IpPermissions.1.Groups.1.GroupId": group_id}))

    def delete_pool_groups(self, pool_id: str) -> list[str]:
        """Delete the pool's groups: the one made here by its id, then every group still tagged with the
        pool (one listing when there is none: the listing is also the proof they are gone)."""
        tried: list[str] = []
        made = self._made.get(pool_id)
        candidates = [made] if made else self.owned_groups(pool_id)
        while candidates:
            for group_id in candidates:
                try:  # returns False under moto although the group is gone: the listing below decides
                    self._call("DeleteSecurityGroup", lambda: self.driver.ex_delete_security_group_by_id(group_id))
                except Exception as exc:
                    if self.aws.classify(exc) is not ErrorKind.NOT_FOUND:
                        raise
                tried.append(group_id)
            remaining = self.owned_groups(pool_id)
            if any(g in tried for g in remaining):
                raise ProvisionError(f"aws: security groups {remaining} of pool {pool_id} still exist", kind="fatal")
            candidates = remaining  # groups of the pool made elsewhere: deleted too
        self._made.pop(pool_id, None)
        return [f"security group {g}" for g in tried]

    # ---- the pool's cluster placement group ------------------------------------------------------------

    def placement_group(self, pool_id: str) -> str:
        """The pool's cluster placement group (made if it does not exist yet)."""
        name = f"skyhive-{pool_id}"
        if name in self._placement_groups(pool_id):
            return name
        self._call("CreatePlacementGroup", lambda: self.driver.request({
            "Action": "CreatePlacementGroup", "GroupName": name, "Strategy": "cluster",
            **self.aws._tags(pool_id, "placement-group")}))
        return name

    def _placement_groups(self, pool_id: str) -> list[str]:
        body = self._call("DescribePlacementGroups", lambda: self.driver.request({
            "Action": "DescribePlacementGroups", "Filter.1.Name": f"tag:{POOL_TAG}", "Filter.1.Value.1": pool_id}))
        return [el.text for el in body.iter() if el.tag.endswith("}groupName") and el.text]

    def delete_placement_group(self, pool_id: str) -> list[str]:
        """Delete the pool's placement groups (found by tag; retried by the caller while still in use)."""
        deleted = []
        for name in self._placement_groups(pool_id):
            try:
                self._call("DeletePlacementGroup", lambda: self.driver.request({
                    "Action": "DeletePlacementGroup", "GroupName": name}))
            except Exception as exc:
                if self.aws.classify(exc) is not ErrorKind.NOT_FOUND:
                    raise
            deleted.append(f"placement group {name}")
        return deleted

