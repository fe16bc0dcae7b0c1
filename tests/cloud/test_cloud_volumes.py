"""Persistent volumes on AWS (moto, in-process, in the loopback-only namespace; issue 39, done-when 3): a task's
`volumes:` makes an EBS volume on its first launch and attaches it to the head node; the volume survives
`down`; a later launch of the same task attaches the same volume again (in its zone); `skyhive volumes
delete` removes it, and nothing else does. Nodes are never connected to (the tests stop at `running`):
what mounts the volume on the node is the head node's first-boot command, checked as text."""

from __future__ import annotations

import textwrap

import anyio
import pytest

from skyhive.cli import main
from skyhive.providers.cloud.aws import AWS
from skyhive.runtime.commands.plan import plan_launch
from skyhive.runtime.commands.resources import cluster_spec
from skyhive.runtime.commands.taskfile import TaskFileError, loads
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only]

TASK = """\
    name: keeps-data
    resources:
      infra: aws/us-east-1
      instance_type: t3.micro
      image_id: IMAGE
    volumes:
      /mnt/data: ckpt
      /mnt/cache: {name: cache, size: 20}
    run: ls /mnt/data
    """


@pytest.fixture
def aws_account(moto_ec2, monkeypatch):
    monkeypatch.setattr("skyhive.providers.cloud.aws_network.public_address", lambda *a, **k: "192.0.2.1/32")
    yield moto_ec2
    assert leftovers() == NOTHING_LEFT  # no instance, group or key pair left (volumes are not in this count)


def _volumes() -> dict[str, dict]:
    found = ec2_client().describe_volumes(Filters=[{"Name": "tag-key", "Values": ["skyhive-volume"]}])["Volumes"]
    return {next(t["Value"] for t in v["Tags"] if t["Key"] == "skyhive-volume"): v for v in found}


def _launch(image: str, pool: str):  # type: ignore[no-untyped-def]
    planned = plan_launch(loads(textwrap.dedent(TASK).replace("IMAGE", image), source="t.yaml"))
    assert isinstance(planned.provider, AWS)
    provider = planned.provider
    handles = anyio.run(provider.create, cluster_spec(planned.task, provider, pool))
    return provider, handles


def test_a_volume_survives_down_is_attached_again_and_only_delete_removes_it(aws_account, capsys):
    provider, handles = _launch(aws_account.image, "p-vol-1")
    head = next(h for h in handles if h.node == 0)
    volumes = _volumes()
    assert set(volumes) == {"ckpt", "cache"}
    ckpt, cache = volumes["ckpt"], volumes["cache"]
    assert ckpt["Size"] == 10 and cache["Size"] == 20 and ckpt["AvailabilityZone"] == head.extra["zone"]
    assert [a["InstanceId"] for a in ckpt["Attachments"]] == [head.provider_id]
    assert head.extra["volumes"] == {"/mnt/data": ckpt["VolumeId"], "/mnt/cache": cache["VolumeId"]}
    mount = head.reach.ready_command
    assert f"Amazon_Elastic_Block_Store_{ckpt['VolumeId'].replace('-', '')}" in mount and "mount $d /mnt/data" in mount
    assert "cloud-init status --wait" in mount  # the first boot is still waited for, before the mounts

    anyio.run(provider.down, "p-vol-1")  # the pool goes: its instance, group and key pair; the volumes stay
    after = _volumes()
    assert set(after) == {"ckpt", "cache"} and after["ckpt"]["VolumeId"] == ckpt["VolumeId"]
    assert all(v["State"] == "available" and not v["Attachments"] for v in after.values())

    again, handles = _launch(aws_account.image, "p-vol-2")  # a later launch of the same task
    head = next(h for h in handles if h.node == 0)
    attached = _volumes()
    assert {n: v["VolumeId"] for n, v in attached.items()} == {"ckpt": ckpt["VolumeId"], "cache": cache["VolumeId"]}
    assert [a["InstanceId"] for a in attached["ckpt"]["Attachments"]] == [head.provider_id]
    assert head.extra["zone"] == ckpt["AvailabilityZone"]  # launched where its volumes are

    assert main(["volumes", "ls"]) == 0
    listed = capsys.readouterr().out
    assert "ckpt" in listed and ckpt["VolumeId"] in listed and "in-use" in listed and head.provider_id in listed
    assert main(["volumes", "delete", "ckpt", "-y"]) == 1  # attached: refused, nothing deleted
    assert "take down the pool that uses it first" in capsys.readouterr().err and set(_volumes()) == {"ckpt", "cache"}

    anyio.run(again.down, "p-vol-2")
    assert set(_volumes()) == {"ckpt", "cache"}
    assert main(["volumes", "delete", "ckpt", "cache", "-y"]) == 0
    assert "volume ckpt: deleted" in capsys.readouterr().out
    assert _volumes() == {}
    assert main(["volumes", "ls"]) == 0 and "no volumes" in capsys.readouterr().out


def test_volumes_on_a_provider_that_keeps_none_are_refused(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("volumes:\n  /mnt/data: ckpt\nrun: ls /mnt/data\n")
    assert main(["launch", "-y", "--provider", "slurm", str(tmp_path / "t.yaml"), "--dryrun"]) == 2
    assert "the slurm provider keeps no volumes" in capsys.readouterr().err
    with pytest.raises(TaskFileError, match="volumes./mnt/x: expected a volume name"):
        loads("volumes:\n  /mnt/x: {size: 3}\nrun: x\n", source="t.yaml")
    with pytest.raises(TaskFileError, match="must be an absolute path"):
        loads("volumes:\n  data: ckpt\nrun: x\n", source="t.yaml")
