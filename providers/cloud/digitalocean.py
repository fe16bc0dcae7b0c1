"""DigitalOcean droplets through apache-libcloud: `sky.DigitalOcean(region="nyc3", size="s-2vcpu-4gb")`.

The phases are implemented once in `providers.cloud.base.LibcloudProvider` (see `providers.base.Provider`
for each contract); this module holds what is DigitalOcean's own: tags set at creation
(``skyhive-pool:<pool>``, ``skyhive-node:<index>``) and used to find droplets again, the pool's SSH key
registered on the account, a cloud firewall per pool (SSH from the client to the pool's tag, all traffic
between droplets with the tag; libcloud has no firewall call, so it is sent as a raw API request), and
error classification by HTTP status and message (DigitalOcean's errors carry no finer code in libcloud).

The pool's tag is created (``POST /v2/tags``) before the firewall that names it: DigitalOcean's firewall
API accepts only tags that exist. DigitalOcean has no spot machines. GPU droplets are chosen by
accelerator from the shipped table ``data/digitalocean.json`` and live in a few regions only (not the
default ``nyc3``): a GPU pool is placed in a region of `regions` that offers the size, else in the regions
the table lists for it (logged), with DigitalOcean's GPU base image (NVIDIA driver included). Every
droplet gets the boot script as ``user_data`` (cloud-init installs `uv`).

Droplets end themselves only with a **node token** (`node_token`, ``DIGITALOCEAN_NODE_TOKEN``: a custom-scoped
token with ``droplet:delete``; `do_end.py`): then each droplet's user data writes the self-end script
(metadata id -> ``DELETE /v2/droplets/ID``, ``shutdown -h now`` if refused), arms the boot-time limit as a
systemd timer running it (lifted by bootstrap), and the idle watchdog runs it. Without one, a warning per
pool: a client killed leaves its droplets running until `skyhive down`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..features import Feature, Features
from ..base import ClusterSpec, NodeHandle, ProvisionError, SSHReach
from ..volumes import mounts_of
from . import catalog, do_volumes
from .base import ACTIVE_STATES, CloudTimeouts, ErrorKind, LibcloudProvider
from . import do_end
from .boot import BOOT_LIMIT, BOOT_SCRIPT, check_limit, ready_command
from .keys import pool_key, remove_pool_key

__all__ = ["DigitalOcean", "DO_ERRORS"]

#: codes made from the HTTP status (and, for 422, the message) -> kinds
#: The droplet size of a pool that names no `size`.
DEFAULT_SIZE = "s-2vcpu-4gb"
DEFAULT_IMAGE = "ubuntu-22-04-x64"

log = logging.getLogger(__name__)

#: characters DigitalOcean takes in a tag (https://docs.digitalocean.com/reference/api/digitalocean/#tag/Tags:
#: "Tags may contain letters, numbers, colons, dashes, and underscores", 255 at most) and in a droplet
#: name (hostname rules: letters, digits, dots and dashes; #tag/Droplets, "Create a New Droplet")
_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")


def _spelled(name: str, allowed: frozenset[str], limit: int) -> str:
    """`name` as it is where only `allowed` characters fit; otherwise each other character becomes a dash and
    a hash of the original is appended (two names never collide), cut to `limit` characters."""
    if set(name) <= allowed and len(name) <= limit:
        return name
    import hashlib

    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return "".join(c if c in allowed else "-" for c in name)[: limit - 9].strip("-.") + "-" + digest


def gpu_image(size: str) -> str:
    """DigitalOcean's GPU base image for a GPU size (Ubuntu with the NVIDIA driver): one per GPU count."""
    return "gpu-h100x8-base" if "x8" in size else "gpu-h100x1-base"

DO_ERRORS: Mapping[str, ErrorKind] = {
    "http429": ErrorKind.TRANSIENT,
    "http500": ErrorKind.TRANSIENT,
    "http502": ErrorKind.TRANSIENT,
    "http503": ErrorKind.TRANSIENT,
    "http404": ErrorKind.NOT_FOUND,
    "droplet_limit": ErrorKind.QUOTA,
    "region_unavailable": ErrorKind.CAPACITY,
    "http409": ErrorKind.DEPENDENCY,
}

#: libcloud's node states (from DigitalOcean's new/active/off/archive) -> the base's state words
_STATES = {"pending": "pending", "starting": "pending", "running": "running", "rebooting": "running",
           "stopping": "stopping", "stopped": "stopped", "terminated": "terminated"}


class DigitalOcean(LibcloudProvider):
    """Droplets on DigitalOcean, created per pool and destroyed with it.

    - `region` ("nyc3"; `regions` to try several in order), `size` (a droplet size slug, default
      ``s-2vcpu-4gb``; with an accelerator, the cheapest GPU size that has it), `image` (an
      image slug), `ssh_user` ("root" on DigitalOcean images), `ssh_cidr` (who may open SSH).
    - `volumes`: persistent volumes (a task's `volumes:`): Block Storage volumes attached to the head
      droplet (`do_volumes.py`).
    - `node_token` (default: ``DIGITALOCEAN_NODE_TOKEN``, else none): a custom-scoped personal access token
      with ``droplet:delete`` (and the scopes DigitalOcean requires with it: ``droplet:read``, ``regions:read``,
      ``sizes:read``, ``actions:read``, ``image:read``), never the account's token. It is put on every droplet
      (in its user data, and a root-only file) so that the droplet can delete itself: by the boot-time limit
      and the idle watchdog. **Any process on the pool's droplets can read it** (user data stays readable
      through the metadata service) **and with it delete any droplet of the account** — scopes are per
      resource type. Checked before any create: not the account's token, accepted, can read droplets, cannot
      read the account. Never recorded (`describe` leaves it out: `skyhive down` does not need it) or logged.
      Without it: no boot-time limit and no watchdog (a warning per pool).
    - `boot_limit`: seconds after boot by which a droplet no client has bootstrapped deletes itself (with a
      node token) — default 3600, 600..86400, lifted by bootstrap; None or 0: none.
    - `idle_timeout`: seconds with no client after which a bootstrapped droplet deletes itself (with a node
      token; default 1800); None: no watchdog.
    Credentials: an API token in ``DIGITALOCEAN_ACCESS_TOKEN``.
    """

    name: ClassVar[str] = "digitalocean"
    features: ClassVar[Features] = Features(Feature.CREATES_MACHINES, Feature.CHECK, Feature.VOLUMES, notices="", cannot={
        Feature.KEEP: "kept cloud pools are built and tested for aws only (its instances' reach, idle watchdog and "
                      "termination by recorded instance id); use a pool without a name, or give the instances to "
                      "sky.SSH(hosts=...) to keep a pool on them"})
    chooses = frozenset({"accelerator"})  # from the shipped table
    resource_options = {"region": "region", "instance_type": "size", "image_id": "image", "volumes": "volumes"}
    error_kinds = DO_ERRORS
    retries_launch = True  # each droplet's create is retried on its own, idempotently (`_create`)
    state_map = {"pending": "provisioning", "running": "running", "stopped": "terminating"}

    def __init__(self, region: str = "nyc3", regions: Sequence[str] | None = None, size: str | None = None,
                 image: str | None = None, ssh_user: str = "root", ssh_cidr: str = "0.0.0.0/0",
                 timeouts: CloudTimeouts | None = None, volumes: Sequence[Any] = (), *,
                 node_token: str | None = None, boot_limit: float | None = BOOT_LIMIT,
                 idle_timeout: float | None = 1800.0) -> None:
        super().__init__(timeouts=timeouts)
        self.boot_limit = check_limit(boot_limit, "DigitalOcean(boot_limit=...)")
        self.idle_timeout = idle_timeout
        self._node_token = node_token  # never in describe(), plans or logs
        self.volumes = mounts_of(volumes)  # Block Storage volumes for the head node (`do_volumes.py`)
        self.region = region
        self.regions = list(regions) if regions else [region]
        self.size = size
        self.image = image
        self.ssh_user = ssh_user
        self.ssh_cidr = ssh_cidr
        self._driver: Any = None
        self._plans: dict[str, tuple[catalog.Choice, list[str]]] = {}
        self._warned: set[str] = set()  # pools told that their droplets cannot end themselves

    def describe(self) -> dict[str, Any]:
        desc: dict[str, Any] = {
            "provider": self.name, "region": self.region, "regions": self.regions, "size": self.size,
            "image": self.image, "ssh_user": self.ssh_user, "ssh_cidr": self.ssh_cidr,
            "boot_limit": self.boot_limit, "idle_timeout": self.idle_timeout}  # never the node token
        if self.volumes:
            desc["volumes"] = [[v.target, v.name, v.size_gb] for v in self.volumes]
        return desc

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        """See `LibcloudProvider.wait_running`; the head node also gets the pool's volumes (`do_volumes`)."""
        running = await super().wait_running(handle, report)
        if self.volumes and running.node == 0:
            running = await self.call(do_volumes.attach_all, self, running)
        return running

    def find_volume(self, name: str) -> Any:
        """See `Provider.find_volume` (Block Storage, `do_volumes.py`)."""
        return do_volumes.find(self, name)

    def delete_volume(self, name: str) -> None:
        """See `Provider.delete_volume` (Block Storage, `do_volumes.py`)."""
        do_volumes.delete(self, name)

    @property
    def node_token(self) -> str | None:
        """The node token (`node_token=`, else ``DIGITALOCEAN_NODE_TOKEN``), or None."""
        return self._node_token or os.environ.get(do_end.NODE_TOKEN_ENV) or None

    @property
    def driver(self) -> Any:
        if self._driver is None:
            from libcloud.compute.drivers.digitalocean import DigitalOceanNodeDriver

            token = os.environ.get("DIGITALOCEAN_ACCESS_TOKEN")
            if not token:
                raise ProvisionError("digitalocean: set DIGITALOCEAN_ACCESS_TOKEN", kind="fatal")
            self._driver = DigitalOceanNodeDriver(token, api_version="v2")
        return self._driver

    def error_code(self, exc: BaseException) -> str | None:
        from libcloud.common.exceptions import BaseHTTPError

        if not isinstance(exc, BaseHTTPError):
            return super().error_code(exc)
        text = str(exc).lower()
        if exc.code == 422 and "droplet limit" in text:
            return "droplet_limit"
        if exc.code == 422 and ("region" in text and "unavailable" in text or "not available" in text):
            return "region_unavailable"
        return f"http{exc.code}"

    @staticmethod
    def tags(pool_id: str, index: int | None = None) -> list[str]:
        """The droplet tags that say a droplet belongs to the pool (and which node it is). DigitalOcean's
        tags take letters, digits, colons, dashes and underscores (255 at most): a pool name with anything
        else ("exp.1") is spelled with dashes and a short hash of the name, so two pools never share a tag;
        the droplet's name keeps the original where it can (see `droplet_name`)."""
        tags = [f"skyhive-pool:{_spelled(pool_id, _TAG_CHARS, 200)}"]
        return tags if index is None else [*tags, f"skyhive-node:{index}"]

    @staticmethod
    def droplet_name(pool_id: str, index: int) -> str:
        """Node `index`'s droplet name: hostname rules (letters, digits, dots, dashes; a letter or digit at
        both ends), so ``train_gpt2-1a2b3c`` (a task's pool) becomes ``skyhive-train-gpt2-1a2b3c-<hash>-0``;
        its tag keeps the original (underscores are tag characters)."""
        return f"skyhive-{_spelled(pool_id, _NAME_CHARS, 200)}-{index}"

    # ---- the blocking primitives -----------------------------------------------------------------------

    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        return do_volumes.pin_regions(self, self._plan(spec)[1])  # a pool with volumes: where they are

    def _plan(self, spec: ClusterSpec) -> tuple[catalog.Choice, list[str]]:
        """(the size and its price, the regions to try in order). A GPU pool goes where its size is."""
        if spec.pool_id in self._plans:
            return self._plans[spec.pool_id]
        if not spec.accelerator:
            size = self.size or DEFAULT_SIZE
            try:
                choice = catalog.choose("digitalocean", self.regions[0], instance_type=size, nodes=spec.nodes)
            except ProvisionError:  # a region or size the table does not price: taken on trust
                choice = catalog.unpriced("digitalocean", self.regions[0], size, nodes=spec.nodes, spot=False)
            plan = (choice, list(self.regions))
        else:
            name = catalog.parse_accelerator(spec.accelerator)[0]
            offered = list(catalog.offered("digitalocean", name))
            candidates = [r for r in self.regions if r in offered] or offered
            if not [r for r in self.regions if r in offered] and offered:
                log.warning("digitalocean: pool %s: %s droplets are not offered in %s; using %s", spec.pool_id,
                            name, ", ".join(self.regions), ", ".join(offered))
            first_error: ProvisionError | None = None
            found: list[tuple[catalog.Choice, str]] = []
            for region in candidates or self.regions:
                try:
                    found.append((catalog.choose("digitalocean", region, accelerator=spec.accelerator, cpus=spec.cpus,
                                                 memory_gb=spec.memory_gb, instance_type=self.size, nodes=spec.nodes),
                                  region))
                except ProvisionError as exc:
                    first_error = first_error or exc
            if not found:
                assert first_error is not None
                raise first_error
            choice = found[0][0]
            plan = (choice, [region for c, region in found if c.instance_type == choice.instance_type])
        self._plans[spec.pool_id] = plan
        return plan

    def droplet_size(self, spec: ClusterSpec) -> str:
        """The size slug of `spec`'s droplets (by accelerator from the table, else `size` or the default)."""
        return self._plan(spec)[0].instance_type

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """See `Provider.plan`: the droplet size, its price when the table has it, the regions tried."""
        choice, regions = self._plan(spec)
        return {**choice.as_dict(), "regions": regions, "summary": choice.summary(),
                "boot_limit": do_end.shown(bool(self.node_token), self.boot_limit, self.idle_timeout)}

    def user_data(self) -> str:
        """A droplet's user data: the boot script, after the self-end block when there is a node token."""
        token = self.node_token
        if not token:
            return BOOT_SCRIPT
        head, _, rest = BOOT_SCRIPT.partition("\n")
        return f"{head}\n{do_end.boot_block(token, self.boot_limit)}{rest}"

    def _node_token_status(self, path: str) -> int:
        """``GET path`` on DigitalOcean's API with the node token: the HTTP status."""
        import requests

        answer = requests.get(f"{do_end.API}{path}", headers={"Authorization": f"Bearer {self.node_token}"},
                              timeout=30)
        return answer.status_code

    def image_for(self, spec: ClusterSpec) -> str:
        info = catalog.instance("digitalocean", self.droplet_size(spec))
        if self.image:
            return self.image
        return gpu_image(self.droplet_size(spec)) if info is not None and info.accelerators else DEFAULT_IMAGE

    def prepare_sync(self, spec: ClusterSpec) -> None:
        self.droplet_size(spec)  # an accelerator request it cannot meet fails before anything is created
        if self.node_token:  # a token that must not go on a node is refused before anything is created
            do_end.check_node_token(self.node_token, os.environ.get("DIGITALOCEAN_ACCESS_TOKEN"),
                                    self._node_token_status)
        elif spec.pool_id not in self._warned:  # here, not in `plan`: a cross-cloud search plans offers it skips
            self._warned.add(spec.pool_id)
            do_end.warn_cannot_end(spec.pool_id)
        _, public = pool_key(spec.pool_id)
        name = f"skyhive-{spec.pool_id}"
        if not any(k.name == name for k in self.driver.list_key_pairs()):
            self.driver.create_key_pair(name, public)
        # the firewall names the pool's tag, and DigitalOcean accepts only tags that exist: make it first
        self.driver.connection.request("/v2/tags", method="POST", data=json.dumps({"name": self.tags(spec.pool_id)[0]}))
        if not self._firewall_ids(spec.pool_id):
            self.driver.connection.request("/v2/firewalls", method="POST", data=json.dumps(self.firewall_request(spec.pool_id)))

    def firewall_request(self, pool_id: str) -> dict[str, Any]:
        """The body of the pool's firewall: SSH from the client, everything between its droplets."""
        tag = self.tags(pool_id)[0]
        inside = {"tags": [tag]}
        return {
            "name": self.firewall_name(pool_id), "tags": [tag],
            "inbound_rules": [
                {"protocol": "tcp", "ports": "22", "sources": {"addresses": [self.ssh_cidr]}},
                {"protocol": "tcp", "ports": "all", "sources": inside},
                {"protocol": "udp", "ports": "all", "sources": inside},
                {"protocol": "icmp", "sources": inside},
            ],
            "outbound_rules": [{"protocol": p, "ports": "all", "destinations": {"addresses": ["0.0.0.0/0", "::/0"]}}
                               for p in ("tcp", "udp")],
        }

    def _firewall_ids(self, pool_id: str) -> list[str]:
        body = self.driver.connection.request("/v2/firewalls").object or {}
        return [fw["id"] for fw in body.get("firewalls", []) if fw.get("name") == self.firewall_name(pool_id)]

    @staticmethod
    def firewall_name(pool_id: str) -> str:
        """The pool's firewall name (letters, digits, dots and dashes, as a droplet name)."""
        return f"skyhive-{_spelled(pool_id, _NAME_CHARS, 200)}"

    def create_request(self, spec: ClusterSpec, index: int) -> dict[str, Any]:
        """`create_node`'s `ex_create_attr` for node `index` (what is sent besides name/size/image/region)."""
        key = next((k for k in self.driver.list_key_pairs() if k.name == f"skyhive-{spec.pool_id}"), None)
        if key is None:
            raise ProvisionError(f"digitalocean: the pool's SSH key skyhive-{spec.pool_id} is missing", kind="fatal")
        return {"tags": self.tags(spec.pool_id, index), "ssh_keys": [key.fingerprint], "private_networking": True}

    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        return [self._create(spec, i, zone) for i in nodes]

    def _create(self, spec: ClusterSpec, index: int, region_slug: str) -> NodeHandle:
        """Create node `index`'s droplet, idempotently: only this create is retried (429 and 5xx, with the
        `retry` backoff), and before each retry the droplet is looked for by its tags — a create that went
        through although its answer was lost is adopted, never made twice (an extra droplet would be billed
        for the pool's life)."""
        from libcloud.compute.base import NodeImage, NodeLocation, NodeSize

        slug = self.droplet_size(spec)
        size = NodeSize(slug, slug, 0, 0, 0, 0, self.driver)
        image = NodeImage(self.image_for(spec), self.image_for(spec), self.driver)
        region = NodeLocation(region_slug, region_slug, "", self.driver)
        delays = self.retry.delays()
        for attempt in range(len(delays) + 1):
            if attempt:
                found = [h for h in self.list_sync(spec.pool_id) if h.node == index]
                if found:
                    log.info("digitalocean: pool %s: node %s was created by an earlier try; adopted",
                             spec.pool_id, index)
                    return found[0]
            try:
                node = self.driver.create_node(self.droplet_name(spec.pool_id, index), size, image, region,
                                               ex_create_attr=self.create_request(spec, index),
                                               ex_user_data=self.user_data())  # cloud-init, first boot
                return self._handle(node, spec.pool_id, launched_at=time.time())
            except Exception as exc:
                if attempt == len(delays) or not self.is_transient(exc):
                    raise
                log.info("digitalocean: pool %s: creating node %s failed transiently (%s); retrying that call "
                         "in %.1f s", spec.pool_id, index, exc, delays[attempt])
                time.sleep(delays[attempt])
        raise AssertionError("unreachable")

    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        tag = self.tags(pool_id)[0]
        found = [self._handle(n, pool_id) for n in self.driver.list_nodes() if tag in (n.extra.get("tags") or [])]
        return sorted((h for h in found if states is None or h.state in states), key=lambda h: h.node)

    def terminate_sync(self, provider_id: str) -> None:
        from libcloud.compute.base import Node

        self.driver.destroy_node(Node(provider_id, "", None, [], [], self.driver))

    def cleanup_sync(self, pool_id: str) -> list[str]:
        deleted = []
        for firewall_id in self._firewall_ids(pool_id):
            self.driver.connection.request(f"/v2/firewalls/{firewall_id}", method="DELETE")
            deleted.append(f"firewall {firewall_id}")
        for key in self.driver.list_key_pairs():
            if key.name == f"skyhive-{pool_id}":
                self.driver.delete_key_pair(key)
                deleted.append(f"SSH key {key.name}")
        tag = self.tags(pool_id)[0]
        try:
            self.driver.connection.request(f"/v2/tags/{tag}", method="DELETE")
            deleted.append(f"tag {tag}")
        except Exception as exc:
            if self.classify(exc) is not ErrorKind.NOT_FOUND:
                raise
        if remove_pool_key(pool_id):
            deleted.append("the pool's private key")
        return deleted

    def _handle(self, node: Any, pool_id: str, launched_at: float | None = None) -> NodeHandle:
        tags = node.extra.get("tags") or []
        index = next((int(t.split(":", 1)[1]) for t in tags if t.startswith("skyhive-node:")), -1)
        state = _STATES.get(str(getattr(node.state, "value", node.state)), "pending")
        key_path, _ = pool_key(pool_id, create=False)
        public = (node.public_ips or [None])[0]
        private = (node.private_ips or [""])[0] or public or ""
        extra: dict[str, Any] = {"pool_id": pool_id, "zone": node.extra.get("region")}
        if launched_at is not None:
            extra["launched_at"] = launched_at
        size = str(node.extra.get("size_slug") or "")
        info = catalog.instance("digitalocean", size) if size else None
        gpus = info.accelerators if info else 0
        return NodeHandle(node=index, provider_id=str(node.id), private_addr=private, public_addr=public, state=state,
                          extra=extra, accelerators=gpus, accelerator=info.accelerator if info else None,
                          reach=SSHReach(host=public or private, user=self.ssh_user, key=str(key_path),
                                         ready_command=ready_command(gpu=bool(gpus)), **self._self_end()))

    def _self_end(self) -> dict[str, Any]:
        """The reach's fields: bootstrap always lifts the boot-time limit's timer (harmless where none was armed,
        and a provider rebuilt without the node token — a managed job's controller — must not leave one armed on
        a droplet it bootstraps); with a node token, the idle watchdog runs the self-end script."""
        if not self.node_token:
            return {"boot_limit_off": do_end.LIMIT_OFF}
        return {"idle_shutdown": self.idle_timeout or 0.0, "shutdown_command": do_end.SHUTDOWN_COMMAND,
                "boot_limit_off": do_end.LIMIT_OFF}
