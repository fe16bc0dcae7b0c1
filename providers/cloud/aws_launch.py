"""One zone attempt of an AWS launch, idempotent: a pool never holds more instances than nodes.

- One ``RunInstances`` per zone attempt with ``MinCount = MaxCount = <nodes still missing>`` and a
  ``ClientToken`` derived from (pool, zone, attempt, missing nodes): a retry of a call whose answer was
  lost is answered by EC2 with that call's instances instead of new ones.
- Only that call is retried (throttling and 5xx: jittered backoff; the ``*.NotFound`` of what the pool
  made moments ago: for `CloudTimeouts.visibility_grace`). Before each try, what already runs is counted
  by tag, and only the difference is asked for; instances of this attempt whose answer was lost (tagged
  with the pool and the attempt, not yet numbered) are adopted and numbered.
- Instances are tagged at creation with the pool and the attempt (``skyhive-launch``), then numbered
  (``skyhive-node``) one by one; instances made but not numbered are terminated before the error is
  raised, and whatever is left is found by the pool tag at the pool's end (`AWS.cleanup`).
- Each node asks for IMDSv2 only (hop limit 2), EFA on every network card and the pool's placement group
  where the pool has them (a node with several interfaces is then given an Elastic IP: `aws_efa`), spot one-time with terminate, and a gp3 root volume deleted with the instance.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from ..base import ClusterSpec, NodeHandle, ProvisionError
from . import aws_efa
from .aws_data import JUST_MADE, LAUNCH_TAG, METADATA_OPTIONS, NODE_TAG, POOL_TAG, b64, client_token, user_data
from .base import ErrorKind

#: the provider (`aws.AWS`): typed loosely, as this module is imported by it
AWS = Any

__all__ = ["run_params", "launch_in_zone"]

log = logging.getLogger(__name__)


def run_params(aws: AWS, spec: ClusterSpec, zone: str, count: int, token: str, launch_id: str) -> dict[str, str]:
    """The RunInstances parameters of one zone attempt for `count` nodes."""
    choice = aws.choice(spec)
    key_name, group_id, placement = aws._shared[spec.pool_id]
    image = aws._image(choice)
    root_device = image.extra.get("root_device_name") or "/dev/sda1"
    params = {
        "ImageId": image.id, "InstanceType": choice.instance_type, "MinCount": str(count),
        "MaxCount": str(count), "ClientToken": token, "KeyName": key_name, "UserData": b64(user_data(aws.boot_limit)),
        "InstanceInitiatedShutdownBehavior": "terminate" if choice.spot else aws.shutdown_behavior, **METADATA_OPTIONS,
        "BlockDeviceMapping.1.DeviceName": root_device, "BlockDeviceMapping.1.Ebs.VolumeSize": str(aws.disk_gb),
        "BlockDeviceMapping.1.Ebs.VolumeType": "gp3", "BlockDeviceMapping.1.Ebs.DeleteOnTermination": "true",
        **aws_efa.interface_params(aws.network.subnet(zone), group_id, aws.efa_cards(spec)),
    }
    if placement:
        params["Placement.GroupName"] = placement
    if choice.spot:
        params.update({"InstanceMarketOptions.MarketType": "spot",
                       "InstanceMarketOptions.SpotOptions.SpotInstanceType": "one-time",
                       "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior": "terminate"})
    tags = {**dict(spec.tags), "Name": f"skyhive-{spec.pool_id}", POOL_TAG: spec.pool_id, LAUNCH_TAG: launch_id}
    params["TagSpecification.1.ResourceType"] = "instance"
    for i, (k, v) in enumerate(tags.items(), start=1):
        params[f"TagSpecification.1.Tag.{i}.Key"] = k
        params[f"TagSpecification.1.Tag.{i}.Value"] = v
    return params

def launch_in_zone(aws: AWS, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
    """One zone attempt: the nodes of `nodes` not already running (counted by tag) in one RunInstances
    call, retried alone; the instances it made are numbered by tag. Nodes with several network
    interfaces (EFA on several cards) get their Elastic IP, the only way EC2 gives them a public address."""
    present = _launch(aws, spec, nodes, zone)
    if aws_efa.several_interfaces(aws.efa_cards(spec)):
        present = aws_efa.attach_public_addresses(aws, spec.pool_id, present)
    return [present[i] for i in nodes]


def _launch(aws: AWS, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> dict[int, NodeHandle]:
    pool_id = spec.pool_id
    if pool_id not in aws._shared:  # prepared by another call (or process): found again by tag
        groups = [aws.security_group] if aws.security_group else aws._owned_groups(pool_id)
        if not groups:
            raise ProvisionError(f"aws: pool {pool_id} has no security group: prepare() must run first",
                                 kind="fatal")
        placement = aws.network.placement_group(pool_id) if aws.uses_placement_group(spec) else None
        aws._shared[pool_id] = (f"skyhive-{pool_id}", groups[0], placement)
    with aws._lock:
        attempt = aws._attempts[(pool_id, zone)] = aws._attempts.get((pool_id, zone), 0) + 1
        # the first launch of a pool this provider prepared from nothing (its key pair imported new here):
        # nothing of the pool can run yet, so the count by tag before it is known to be empty. Every
        # retry, later attempt, or pool prepared elsewhere is counted.
        known_empty = pool_id in aws._imported and pool_id not in aws._launched
        aws._launched.add(pool_id)
    launch_id = f"{zone}/{attempt}"
    wanted = list(nodes)
    delays = aws.retry.delays()
    tries = 0
    grace = time.monotonic() + aws.timeouts.visibility_grace
    while True:
        present = {} if known_empty else _claim(aws, pool_id, wanted, launch_id)
        known_empty = False
        missing = [i for i in wanted if i not in present]
        if not missing:
            return {i: present[i] for i in wanted}
        token = client_token(pool_id, zone, attempt, missing)
        try:
            made = aws.driver.run_instances(run_params(aws, spec, zone, len(missing), token, launch_id))
        except Exception as exc:
            kind, code = aws.classify(exc), aws.error_code(exc)
            if kind is ErrorKind.TRANSIENT and tries < len(delays):
                wait = delays[tries] * random.uniform(0.5, 1.0)
                tries += 1
            elif code in JUST_MADE and time.monotonic() < grace:
                wait = aws.timeouts.poll
            else:
                raise
            log.info("aws: pool %s: RunInstances of %d in %s: %s; counting by tag, then retrying in %.2f s",
                     pool_id, len(missing), zone, exc, wait)
            time.sleep(wait)
            continue
        try:
            present.update(_number(aws, pool_id, made, missing))
        except BaseException:
            for node in made:  # made but not numbered: no one else would know them by index
                aws._terminate_quietly(node.id)
            raise
        return {i: present[i] for i in wanted}

def _claim(aws: AWS, pool_id: str, wanted: Sequence[int], launch_id: str) -> dict[int, NodeHandle]:
    """The pool's live instances that are nodes of `wanted` (by tag); instances of this very launch
    that were made but never numbered (the answer to their call was lost) are numbered now."""
    live = aws.list_sync(pool_id, ("pending", "running"))
    present = {h.node: h for h in live if h.node in set(wanted)}
    orphans = [h for h in live if h.node < 0 and h.extra.get("launch") == launch_id]
    missing = [i for i in wanted if i not in present]
    if orphans:
        log.info("aws: pool %s: %d instance(s) of launch %s arrived without an answer; adopted", pool_id,
                 len(orphans), launch_id)
        extra = orphans[len(missing):]
        for handle in extra:  # more than needed (cannot happen with one call per attempt): not kept
            aws._terminate_quietly(handle.provider_id)
        for index, handle in zip(missing, orphans):
            _tag_node(aws, handle.provider_id, index)
            present[index] = dataclasses.replace(handle, node=index)
    return present

def _number(aws: AWS, pool_id: str, made: Sequence[Any], indices: Sequence[int]) -> dict[int, NodeHandle]:
    if len(made) != len(indices):
        raise ProvisionError(f"aws: RunInstances made {len(made)} instances for {len(indices)} nodes", kind="fatal")
    numbered = {}
    now = time.time()
    for index, node in zip(indices, made):
        _tag_node(aws, node.id, index)
        numbered[index] = dataclasses.replace(aws._handle(node, pool_id, launched_at=now), node=index)
    return numbered

def _tag_node(aws: AWS, instance_id: str, index: int) -> None:
    aws._retrying(f"tagging {instance_id}", lambda: aws.driver.create_tags(instance_id, {NODE_TAG: str(index)}),
                   just_made=True)

