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


GCP_TASK = """\
    name: keeps-data
    resources:
      infra: gcp/us-central1
      instance_type: n2-standard-2
    volumes:
      /mnt/data: ckpt
    run: ls /mnt/data
    """


def test_a_gcp_persistent_disk_survives_down_and_is_attached_again(tmp_path, monkeypatch, capsys):
    """The same on GCP, against the FAKE GCE (tests/cloud/fake_gce.py, its rule G16 for disks)."""
    from skyhive.providers.cloud.base import CloudTimeouts
    from skyhive.providers.cloud.gcp import GCP
    from tests.cloud.fake_gce import FakeGCE
    from tests.cloud.fake_http import install_fakes

    gce = FakeGCE()
    install_fakes(monkeypatch, gce)
    gce.service_account_file(tmp_path / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))

    def launch(pool: str):  # type: ignore[no-untyped-def]
        planned = plan_launch(loads(textwrap.dedent(GCP_TASK), source="t.yaml"))
        provider = planned.provider
        assert isinstance(provider, GCP)
        provider.timeouts = CloudTimeouts(poll=0.01, running=10, terminate=10, cleanup=10)
        handles = anyio.run(provider.create, cluster_spec(planned.task, provider, pool))
        return provider, next(h for h in handles if h.node == 0)

    def disks() -> dict[str, dict]:
        return {name: disk for (_, name), disk in gce.disks.items()}

    first, head = launch("p-gvol-1")
    (zone, name), = gce.disks
    assert name == "skyhive-vol-ckpt" and head.extra["zone"] == zone
    assert disks()[name]["users"] == [f"projects/proj-1/zones/{zone}/instances/{head.provider_id.split('/')[1]}"]
    assert "/dev/disk/by-id/google-skyhive-ckpt" in head.reach.ready_command and "/mnt/data" in head.reach.ready_command
    anyio.run(first.down, "p-gvol-1")
    assert gce.instances == {} and disks()[name]["users"] == []  # the pool went; its disk stayed

    again, head = launch("p-gvol-2")
    assert list(gce.disks) == [(zone, name)] and head.extra["zone"] == zone  # the same disk, in its zone
    assert disks()[name]["users"] == [f"projects/proj-1/zones/{zone}/instances/{head.provider_id.split('/')[1]}"]
    assert main(["volumes", "ls"]) == 0
    listed = capsys.readouterr().out
    assert "ckpt" in listed and " gcp " in listed and "in-use" in listed
    assert main(["volumes", "delete", "ckpt", "-y"]) == 1 and list(gce.disks) == [(zone, name)]
    assert "take down the pool that uses it first" in capsys.readouterr().err
    anyio.run(again.down, "p-gvol-2")
    assert list(gce.disks) == [(zone, name)]
    assert main(["volumes", "delete", "ckpt", "-y"]) == 0 and gce.disks == {} and gce.firewalls == {}


def test_a_local_volume_is_a_directory_that_outlives_its_pools(tmp_path, skyhive_home):
    """On Local the volume is a directory of the state directory linked at the mount point: what one launch
    writes, the next one reads; only `volumes delete` removes it (and its link)."""
    import subprocess
    import sys
    from pathlib import Path

    mount = tmp_path / "mnt" / "data"
    (tmp_path / "t.yaml").write_text(textwrap.dedent(f"""\
        volumes:
          {mount}: notes
        run: |
          echo "run $(date +%s%N)" >> {mount}/log.txt
          wc -l < {mount}/log.txt
        """))

    def skyhive(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "skyhive", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=180)

    first = skyhive("launch", "-y", "t.yaml")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().splitlines()[-1].split()[-1] == "1"
    data = Path(skyhive_home) / "volume-data" / "notes"
    assert mount.is_symlink() and mount.resolve() == data.resolve()
    second = skyhive("launch", "-y", "t.yaml")  # the pool before it is gone; its volume is not
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip().splitlines()[-1].split()[-1] == "2"
    listed = skyhive("volumes", "ls")
    assert "notes" in listed.stdout and "local" in listed.stdout
    gone = skyhive("volumes", "delete", "notes", "-y")
    assert gone.returncode == 0 and "volume notes: deleted" in gone.stdout
    assert not data.exists() and not mount.is_symlink() and not mount.exists()
    assert "no volumes" in skyhive("volumes", "ls").stdout


AZURE_TASK = """\
    name: keeps-data
    resources:
      infra: azure/eastus
      instance_type: Standard_D2s_v5
    volumes:
      /mnt/data: ckpt
    run: ls /mnt/data
    """


def test_an_azure_managed_disk_survives_down_and_is_attached_again(monkeypatch, capsys):
    """The same on Azure, against the FAKE ARM (tests/cloud/fake_arm.py, its rule A9 for managed disks): the
    disk lives in a resource group of its own, which no pool's down deletes."""
    from skyhive.providers.cloud.azure import Azure
    from skyhive.providers.cloud.base import CloudTimeouts
    from tests.cloud.fake_arm import FakeARM
    from tests.cloud.fake_http import install_fakes

    arm = FakeARM("99999999")
    install_fakes(monkeypatch, arm)
    for name, value in (("AZURE_TENANT_ID", "77777777-7777-7777-7777-777777777777"),
                        ("AZURE_SUBSCRIPTION_ID", "99999999"),
                        ("AZURE_CLIENT_ID", "55555555-5555-5555-5555-555555555555"),
                        ("AZURE_CLIENT_SECRET", "p4ssw0rd")):
        monkeypatch.setenv(name, value)
    disk_key = ("/subscriptions/99999999/resourcegroups/skyhive-volumes-eastus/providers/microsoft.compute/disks/"
                "skyhive-vol-ckpt")

    def launch(pool: str):  # type: ignore[no-untyped-def]
        planned = plan_launch(loads(textwrap.dedent(AZURE_TASK), source="t.yaml"))
        provider = planned.provider
        assert isinstance(provider, Azure)
        provider.timeouts = CloudTimeouts(poll=0.01, running=5, terminate=5, cleanup=10)
        handles = anyio.run(provider.create, cluster_spec(planned.task, provider, pool))
        return provider, next(h for h in handles if h.node == 0)

    first, head = launch("p-avol-1")
    disk = arm.resources[disk_key]
    assert disk["properties"]["diskSizeGB"] == 10 and disk["tags"] == {"skyhive-volume": "ckpt"}
    assert disk["managedBy"].endswith("/resourceGroups/skyhive-p-avol-1/providers/Microsoft.Compute/virtualMachines/node-0")
    assert "/dev/disk/azure/scsi1/lun0" in head.reach.ready_command and "/mnt/data" in head.reach.ready_command
    anyio.run(first.down, "p-avol-1")
    assert disk_key in arm.resources and "managedBy" not in arm.resources[disk_key]  # the pool's group went; not it

    again, head = launch("p-avol-2")
    assert arm.resources[disk_key]["managedBy"].endswith("/skyhive-p-avol-2/providers/Microsoft.Compute/"
                                                         "virtualMachines/node-0")
    assert main(["volumes", "ls"]) == 0
    listed = capsys.readouterr().out
    assert "ckpt" in listed and "azure" in listed and "in-use" in listed
    assert main(["volumes", "delete", "ckpt", "-y"]) == 1 and disk_key in arm.resources
    capsys.readouterr()
    anyio.run(again.down, "p-avol-2")
    assert main(["volumes", "delete", "ckpt", "-y"]) == 0 and disk_key not in arm.resources
