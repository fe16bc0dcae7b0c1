"""Persistent volumes on DigitalOcean (issue 39), against `FakeDO` (tests/cloud/fake_do.py, its volume rules
D9-D13): a task's `volumes:` makes a Block Storage volume in the head droplet's region on its first launch
and attaches it; the volume survives `down`; a later launch of the same task goes to the volume's region and
attaches it again; `skyhive volumes delete` removes it (refused while a droplet has it), and nothing else
does. Droplets are never connected to (the tests stop at `running`): what mounts the volume on the droplet is
the head node's first-boot command, checked as text."""

from __future__ import annotations

import textwrap

import anyio
import pytest

from skyhive.cli import main
from skyhive.providers.base import ProvisionError
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.digitalocean import DigitalOcean
from skyhive.providers.volumes import VolumeMount
from skyhive.runtime.commands.plan import plan_launch
from skyhive.runtime.commands.resources import cluster_spec
from skyhive.runtime.commands.taskfile import loads
from tests.cloud.fake_do import FakeDO
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

TASK = """\
    name: keeps-data
    resources:
      infra: digitalocean/REGION
    volumes:
      /mnt/data: ckpt
      /mnt/cache: {name: My_Cache, size: 20}
    run: ls /mnt/data
    """
FAST = CloudTimeouts(poll=0.01, running=5, terminate=5, cleanup=5)


@pytest.fixture
def fake(monkeypatch):
    do = FakeDO()
    install_fakes(monkeypatch, do)
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", do.token)
    yield do
    assert do.droplets == {} and do.firewalls == {} and do.keys == {}  # the pools left nothing (volumes aside)


def _launch(pool: str, region: str = "nyc3"):  # type: ignore[no-untyped-def]
    planned = plan_launch(loads(textwrap.dedent(TASK).replace("REGION", region), source="t.yaml"))
    provider = planned.provider
    assert isinstance(provider, DigitalOcean) and provider.volumes
    provider.timeouts = FAST
    handles = anyio.run(provider.create, cluster_spec(planned.task, provider, pool))
    return provider, next(h for h in handles if h.node == 0)


def _volumes(fake: FakeDO) -> dict[str, dict]:
    return {v["name"]: v for v in fake.volumes.values()}


def test_a_do_volume_survives_down_is_attached_again_and_only_delete_removes_it(fake, capsys):
    provider, head = _launch("p-vol-1")
    volumes = _volumes(fake)
    assert set(volumes) == {"skyhive-vol-ckpt", "skyhive-vol-my-cache"}  # D9: DigitalOcean's spelling
    ckpt, cache = volumes["skyhive-vol-ckpt"], volumes["skyhive-vol-my-cache"]
    assert (ckpt["size_gigabytes"], cache["size_gigabytes"]) == (10, 20)
    assert ckpt["region"]["slug"] == head.extra["zone"] == "nyc3"
    assert ckpt["droplet_ids"] == [int(head.provider_id)] and cache["droplet_ids"] == [int(head.provider_id)]
    assert head.extra["volumes"] == {"/mnt/data": ckpt["id"], "/mnt/cache": cache["id"]}
    mount = head.reach.ready_command
    assert "/dev/disk/by-id/scsi-0DO_Volume_skyhive-vol-ckpt" in mount and "mount $d /mnt/data" in mount
    assert mount.index("skyhive-boot-done") < mount.index("scsi-0DO_Volume")  # first boot waited for, then the mounts

    anyio.run(provider.down, "p-vol-1")  # the droplet, firewall, key go; the volumes stay, detached
    after = _volumes(fake)
    assert {n: v["id"] for n, v in after.items()} == {"skyhive-vol-ckpt": ckpt["id"], "skyhive-vol-my-cache": cache["id"]}
    assert all(v["droplet_ids"] == [] for v in after.values())

    # the task asking for another region: refused, naming where its volumes are (nothing made there)
    with pytest.raises(ProvisionError, match="the task's volumes are in nyc3, which does not offer the machine "
                                             r"\(zones: sfo3\)"):
        _launch("p-vol-x", region="sfo3")
    assert fake.droplets == {}
    again, head = _launch("p-vol-2")  # a later launch of the same task: attached again, in their region
    assert head.extra["zone"] == "nyc3"
    assert _volumes(fake)["skyhive-vol-ckpt"]["droplet_ids"] == [int(head.provider_id)]
    assert len(fake.volumes) == 2  # the same two, none made again

    assert main(["volumes", "ls"]) == 0
    listed = capsys.readouterr().out
    row = next(ln for ln in listed.splitlines() if ln.startswith("ckpt "))
    assert "digitalocean" in row and "nyc3" in row and "in-use" in row and head.provider_id in row
    assert main(["volumes", "delete", "ckpt", "-y"]) == 1  # a droplet has it: refused, nothing deleted
    assert "take down the pool that uses it first" in capsys.readouterr().err and len(fake.volumes) == 2

    anyio.run(again.down, "p-vol-2")
    assert len(fake.volumes) == 2
    assert main(["volumes", "delete", "ckpt", "My_Cache", "-y"]) == 0
    assert "volume ckpt: deleted (digitalocean)" in capsys.readouterr().out
    assert fake.volumes == {}
    assert main(["volumes", "ls"]) == 0 and "no volumes" in capsys.readouterr().out


def test_the_fake_holds_digitaloceans_volume_rules(fake):
    """D9-D12 as the API states them, and skyhive's own checks before it asks."""
    provider = DigitalOcean(timeouts=FAST)
    from skyhive.providers.cloud import do_volumes

    with pytest.raises(ProvisionError, match="a volume is 1 to 16384 GB"):
        do_volumes.ensure(provider, VolumeMount("/mnt/x", "huge", 20000), "nyc3")
    assert fake.volumes == {}
    from libcloud.common.exceptions import BaseHTTPError

    conn = provider.driver.connection
    with pytest.raises(BaseHTTPError, match="must be lowercase"):  # D9
        conn.request("/v2/volumes", method="POST", data='{"name": "Data", "size_gigabytes": 1, "region": "nyc3"}')
    with pytest.raises(BaseHTTPError, match="size_gigabytes"):  # D10
        conn.request("/v2/volumes", method="POST", data='{"name": "data", "size_gigabytes": 0, "region": "nyc3"}')
    made = conn.request("/v2/volumes", method="POST",
                        data='{"name": "data", "size_gigabytes": 1, "region": "nyc3"}').object["volume"]
    with pytest.raises(BaseHTTPError, match="already exists"):  # D9: unique in its region
        conn.request("/v2/volumes", method="POST", data='{"name": "data", "size_gigabytes": 1, "region": "nyc3"}')
    with pytest.raises(BaseHTTPError, match="not found"):  # D11: no such droplet
        conn.request(f"/v2/volumes/{made['id']}/actions", method="POST",
                     data='{"type": "attach", "droplet_id": 1, "region": "nyc3"}')
    conn.request(f"/v2/volumes/{made['id']}", method="DELETE")
    assert fake.volumes == {}


def test_a_volume_in_another_region_than_the_head_droplet_is_refused(fake):
    provider = DigitalOcean(timeouts=FAST, volumes=[("/mnt/data", "ckpt", 10)])
    from skyhive.providers.cloud import do_volumes

    do_volumes.ensure(provider, VolumeMount("/mnt/data", "ckpt", 10), "nyc3")
    with pytest.raises(ProvisionError, match="is in nyc3, the head node in sfo3: a volume attaches to a droplet of "
                                             "its own region only"):
        do_volumes.ensure(provider, VolumeMount("/mnt/data", "ckpt", 10), "sfo3")
    assert main(["volumes", "delete", "ckpt", "-y"]) == 0
    assert fake.volumes == {}
