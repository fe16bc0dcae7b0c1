"""`resources.any_of` over two clouds launches the cheapest offer that can be bought; `resources.ordered`
tries in the given order (issue 39, done-when 2). AWS is moto (in-process, in the loopback-only
namespace); GCP is the FAKE GCE of tests/cloud/fake_gce.py (it answers under `requests`, the other hosts
go on to moto). Nodes are never connected to: the tests stop at `running`, as the other provider tests."""

from __future__ import annotations

import textwrap
from urllib.parse import urlparse

import anyio
import pytest
import requests

from skyhive.providers.fallback import Fallback
from skyhive.runtime.commands.plan import plan_launch
from skyhive.runtime.commands.resources import cluster_spec
from skyhive.runtime.commands.taskfile import loads
from tests.cloud.fake_gce import FakeGCE
from tests.cloud.fake_http import FakeAdapter
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only]


@pytest.fixture
def clouds(moto_ec2, monkeypatch, tmp_path):
    """moto's EC2 (in-process) and a FAKE GCE side by side: a request for a GCE host goes to the fake, every
    other one on through requests (where moto answers it)."""
    gce = FakeGCE()
    fake = FakeAdapter((gce,))
    real = requests.Session.get_adapter
    monkeypatch.setattr(requests.Session, "get_adapter",
                        lambda self, url: fake if (urlparse(url).hostname or "") in fake.by_host else real(self, url))
    gce.service_account_file(tmp_path / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
    # who may SSH in: a documentation address, never looked up (no traffic leaves the test)
    monkeypatch.setattr("skyhive.providers.cloud.aws_network.public_address", lambda *a, **k: "192.0.2.1/32")
    yield moto_ec2, gce
    assert leftovers() == NOTHING_LEFT


def _plan(text: str, image: str):  # type: ignore[no-untyped-def]
    planned = plan_launch(loads(textwrap.dedent(text).replace("IMAGE", image), source="offers.yaml"))
    assert isinstance(planned.provider, Fallback)
    return planned


ANY_OF = """\
    name: offers
    resources:
      any_of:
        - infra: aws/us-east-1
          accelerators: H100:8
          image_id: IMAGE
        - infra: gcp/us-central1
          accelerators: H100:8
    run: nvidia-smi
    """


def _aws_instances() -> list[dict]:
    client = ec2_client()
    return [i for r in client.describe_instances()["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] not in ("terminated", "shutting-down")]


def test_any_of_launches_the_cheapest_offer_that_can_be_bought(clouds):
    moto, gce = clouds
    planned = _plan(ANY_OF, moto.image)
    fallback = planned.provider
    candidates = planned.plan["candidates"]
    assert [c["cloud"] for c in candidates] == ["gcp", "aws"]  # GCP's a3-edgegpu-8g costs less than p5.48xlarge
    assert candidates[0]["price_per_hour"] < candidates[1]["price_per_hour"]
    assert any("offers across clouds, cheapest first" in line for line in planned.lines)

    # the cheapest can be bought: it is the one launched
    spec = cluster_spec(planned.task, fallback, "p-anyof-1")
    handles = anyio.run(fallback.launch, spec, [0])
    assert fallback.chosen is fallback.providers[1] and fallback.chosen.name == "gcp" and len(handles) == 1
    assert [i["machineType"].rsplit("/", 1)[1] for i in gce.instances.values()] == ["a3-edgegpu-8g"]
    assert _aws_instances() == []
    anyio.run(fallback.down, "p-anyof-1")
    assert gce.instances == {}

    # every zone of the cheapest is full: the next offer (AWS, moto) is launched
    gce.exhausted |= {"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-d", "us-central1-f"}
    again = _plan(ANY_OF, moto.image).provider
    handles = anyio.run(again.launch, cluster_spec(planned.task, again, "p-anyof-2"), [0])
    assert again.chosen is not None and again.chosen.name == "aws" and len(handles) == 1
    assert again.skipped and again.skipped[0].startswith("gcp us-central1: capacity")
    assert [i["InstanceType"] for i in _aws_instances()] == ["p5.48xlarge"]
    assert gce.instances == {}
    anyio.run(again.down, "p-anyof-2")
    assert _aws_instances() == []


def test_ordered_tries_the_offers_in_the_given_order(clouds):
    moto, gce = clouds
    planned = _plan("""\
        name: ordered
        resources:
          accelerators: H100:8
          ordered:
            - infra: aws/us-east-1
              image_id: IMAGE
            - infra: gcp/us-central1
        run: nvidia-smi
        """, moto.image)
    fallback = planned.provider
    assert fallback.order == "given"
    assert [c["cloud"] for c in planned.plan["candidates"]] == ["aws", "gcp"]  # the pricier first: as given
    handles = anyio.run(fallback.launch, cluster_spec(planned.task, fallback, "p-ordered"), [0])
    assert fallback.chosen is fallback.providers[0] and fallback.chosen.name == "aws" and len(handles) == 1
    assert [i["InstanceType"] for i in _aws_instances()] == ["p5.48xlarge"] and gce.instances == {}
    anyio.run(fallback.down, "p-ordered")
    assert _aws_instances() == []


def _plan_with(flags: list[str], text: str, image: str, tmp_path):  # type: ignore[no-untyped-def]
    """`skyhive launch FLAGS offers.yaml` as far as its plan: the command line's options applied to the task."""
    import argparse

    from skyhive.runtime.commands.taskflags import add_task_flags, task_from_args

    path = tmp_path / "offers.yaml"
    path.write_text(textwrap.dedent(text).replace("IMAGE", image))
    parser = argparse.ArgumentParser()
    add_task_flags(parser)
    return plan_launch(task_from_args(parser.parse_args([*flags, str(path)]), environ={}))


def test_infra_on_the_command_line_narrows_any_of_to_its_cloud(clouds, tmp_path):
    """SkyPilot applies `--infra`/`--cloud` to every candidate: with `--infra gcp` the AWS entry of any_of is
    dropped and the GCP one is launched (on the fake GCE; nothing on moto), though AWS's is the one a plain
    search would try second and the file names both."""
    moto, gce = clouds
    planned = _plan_with(["--infra", "gcp"], ANY_OF, moto.image, tmp_path)
    provider = planned.provider
    assert provider.name == "gcp" and not isinstance(provider, Fallback)
    assert planned.task.resources.alternatives == () and planned.task.resources.accelerator == "H100"
    assert planned.task.resources.region is None  # `--infra gcp` resets the entry's us-central1, as SkyPilot's
    handles = anyio.run(provider.launch, cluster_spec(planned.task, provider, "p-infra-gcp"), [0])
    assert len(handles) == 1
    assert [i["machineType"].rsplit("/", 1)[1] for i in gce.instances.values()] == ["a3-edgegpu-8g"]
    assert _aws_instances() == []
    anyio.run(provider.down, "p-infra-gcp")
    assert gce.instances == {}


def test_provider_on_the_command_line_keeps_the_ordered_entries_of_its_cloud_in_order(clouds, tmp_path):
    """`--provider aws` over ordered [aws/us-west-2, gcp, aws/us-east-1]: the GCP entry is dropped, the two AWS
    ones stay offers, in the given order, each in its own region."""
    moto, _ = clouds
    planned = _plan_with(["--provider", "aws"], """\
        name: ordered
        resources:
          accelerators: H100:8
          ordered:
            - infra: aws/us-west-2
            - infra: gcp/us-central1
            - infra: aws/us-east-1
              image_id: IMAGE
        run: nvidia-smi
        """, moto.image, tmp_path)
    assert isinstance(planned.provider, Fallback) and planned.provider.order == "given"
    candidates = planned.plan["candidates"]
    assert [(c["cloud"], c["region"]) for c in candidates] == [("aws", "us-west-2"), ("aws", "us-east-1")]


@pytest.mark.parametrize("flags", [["--infra", "azure"], ["--provider", "azure"], ["--infra", "local"]])
def test_an_infra_that_no_entry_is_on_is_an_error_naming_it_and_the_entries(clouds, tmp_path, capsys, flags):
    """None left after `--infra`: exit 2 naming the infra and every entry, nothing created anywhere."""
    from skyhive.cli import main

    moto, gce = clouds
    path = tmp_path / "offers.yaml"
    path.write_text(textwrap.dedent(ANY_OF).replace("IMAGE", moto.image))
    assert main(["launch", "-y", *flags, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{' '.join(flags)}: " in err and "none of the offers of resources.any_of is on" in err
    assert "[0] aws/us-east-1, [1] gcp/us-central1" in err
    assert _aws_instances() == [] and gce.instances == {}
