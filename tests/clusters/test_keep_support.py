"""Keeping a pool is a capability (issue 23): a provider declares what it cannot do with the reason, a kind
of node declares how its nodes are kept (`runtime/nodes/keep.py`), and the record names the kind that keeps
it. (The kept pools themselves: test_clusters.py on Local, test_ssh_clusters.py on SSH hosts,
tests/cloud/test_cloud_clusters.py on AWS-on-moto, tests/test_entry_points.py on a third party's kind.)"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

import skyhive as sky
from skyhive.providers.base import ClusterSpec, NodeHandle, Provider, Reach
from skyhive.runtime.clusters.kept import KeptProvider
from skyhive.runtime.clusters.record import ClusterRecord
from skyhive.runtime.nodes.keep import KeepContext, keep_support
from skyhive.runtime.nodes.registry import register_transport, unregister_transport


def test_each_provider_that_cannot_keep_a_pool_says_why():
    from skyhive.providers.cloud.azure import Azure
    from skyhive.providers.cloud.digitalocean import DigitalOcean
    from skyhive.providers.cloud.gcp import GCP
    from skyhive.providers.fallback import Fallback
    from skyhive.providers.simulated import Simulated
    from skyhive.providers.slurm import Slurm

    for cls in (Azure, DigitalOcean, GCP, Fallback, Simulated, Slurm):
        assert cls.unsupported.get("keep"), cls  # a reason, in words
    for cls in (sky.Local, sky.SSH, sky.AWS):
        assert "keep" not in cls.unsupported, cls
    with pytest.raises(ValueError, match=r"provider 'simulated' cannot keep a pool: simulated nodes live inside"):
        sky.Pool(provider=sky.Simulated(), nodes=1, name="sim", keep=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class OddReach(Reach):
    kind: ClassVar[str] = "oddkind"


class Odd(Provider):
    name = "odd"

    async def launch(self, spec, nodes):
        return [NodeHandle(node=i, provider_id=f"odd-{i}", private_addr="127.0.0.1", reach=OddReach()) for i in nodes]

    async def terminate(self, handles):
        return None


def test_a_kind_that_declares_no_keep_support_is_named_when_a_pool_of_it_would_be_kept():
    register_transport("oddkind", lambda handle, ctx: None)  # a transport, no `keep=`
    try:
        assert keep_support("oddkind") is None
        kept = KeptProvider(Odd(), KeepContext(pool="p", socket_dir="/nonexistent", cluster="c-p-0"))
        assert (kept.name, kept.same_machine, kept.fixed_machines) == ("odd", False, True)  # read through
        handle = asyncio.run(kept.launch(ClusterSpec(pool_id="p", nodes=1), [0]))[0]
        with pytest.raises(sky.ProvisionError, match=r"pool p: node 0 is reached as 'oddkind', a kind of node "
                                                      r"that declares no keep support"):
            asyncio.run(kept.wait_running(handle, lambda state: None))
    finally:
        unregister_transport("oddkind")


def test_the_built_in_kinds_declare_their_keep_support_and_records_name_it():
    assert keep_support("local").kind == "local" and keep_support("local").same_machine
    assert keep_support("ssh").kind == "ssh" and not keep_support("ssh").same_machine
    assert keep_support("slurm") is None and keep_support("simulated") is None
    # records written before `keeper` existed: an SSH or cloud-on-SSH pool has a `cluster`, a Local one none
    old = {"name": "a", "provider": "aws", "nodes": 1, "processes_per_node": 1, "cwd": "/", "socket_dir": "",
           "created": 0.0, "cluster": "c-a-12345678"}
    assert ClusterRecord.from_json(json.dumps(old), where="x").keeper == "ssh"
    assert ClusterRecord.from_json(json.dumps({**old, "cluster": "", "socket_dir": "/s"}), where="x").keeper == "local"
    assert ClusterRecord.from_json(json.dumps({**old, "keeper": "tinykind"}), where="x").keeper == "tinykind"
    # where the workers are is the keeping kind's word; a kind not installed here: the record's own
    from skyhive.runtime.clusters.kept_pool import KeptPool

    def here(data):
        return KeptPool(ClusterRecord.from_json(json.dumps(data), where="x")).here

    assert not here(old)
    assert here({**old, "cluster": "", "socket_dir": "/s"})
    assert not here({**old, "keeper": "notinstalled"})
