"""Accelerators and sizes as data: choosing the cheapest AWS instance type from the shipped table."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from skyhive.providers.base import ProvisionError
from skyhive.providers.cloud import catalog


def price(region: str, itype: str) -> float:
    return catalog._table("aws")["regions"][region][itype][0]


def test_a100_is_the_cheapest_type_with_a100s_in_the_region():
    choice = catalog.choose("aws", "us-east-1", accelerator="A100", nodes=4)
    assert (choice.instance_type, choice.accelerator, choice.accelerators) == ("p4d.24xlarge", "A100", 8)
    # both A100 types of us-east-1 were candidates; the cheaper one won
    assert price("us-east-1", "p4d.24xlarge") < price("us-east-1", "p4de.24xlarge")
    assert choice.price_per_hour == price("us-east-1", "p4d.24xlarge")
    assert choice.cost_per_hour == pytest.approx(4 * choice.price_per_hour)
    assert "us-east-1a" in choice.zones


def test_a_count_and_a_lower_case_name_select_exactly_that_many():
    assert catalog.choose("aws", "us-east-1", accelerator="a100:8").instance_type == "p4d.24xlarge"
    l4 = catalog.choose("aws", "us-east-1", accelerator="L4:4")
    assert (l4.accelerator, l4.accelerators) == ("L4", 4)
    one = catalog.choose("aws", "us-east-1", accelerator="L4")
    assert one.accelerators == 1 and one.price_per_hour < l4.price_per_hour


def test_cpus_and_memory_choose_the_cheapest_machine_without_a_gpu():
    choice = catalog.choose("aws", "us-east-1", cpus=16, memory_gb=64)
    assert choice.vcpus >= 16 and choice.memory_gb >= 64 and choice.accelerators == 0
    table = catalog._table("aws")
    cheaper = [t for t, (p, *_) in table["regions"]["us-east-1"].items()
               if p is not None and p < choice.price_per_hour and table["types"][t][0] >= 16 and table["types"][t][1] >= 64
               and not table["types"][t][3] and table["types"][t][4] == "x86_64"]
    assert cheaper == []


def test_an_accelerator_the_region_lacks_lists_where_it_is_offered():
    with pytest.raises(ProvisionError) as err:
        catalog.choose("aws", "eu-north-1", accelerator="A100")
    text = str(err.value)
    assert "no instance type in eu-north-1 has accelerator A100" in text
    assert "us-east-1 (x8)" in text and "us-west-2 (x8)" in text and "eu-north-1" not in text.split("in: ")[1]


def test_a_count_no_machine_has_lists_the_counts_offered():
    with pytest.raises(ProvisionError, match=r"L4:2.*us-east-1 \(x1/4/8\)"):
        catalog.choose("aws", "us-east-1", accelerator="L4:2")


def test_an_unknown_accelerator_names_the_known_ones():
    with pytest.raises(ProvisionError, match=r"no accelerator called 'Z80'.*known: .*A100.*H100"):
        catalog.choose("aws", "us-east-1", accelerator="Z80")


@pytest.mark.parametrize("bad", ["", ":8", "A100:", "A100:x", "A100:0"])
def test_a_malformed_accelerator_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="accelerator must look like"):
        catalog.parse_accelerator(bad)


def test_a_fixed_type_is_checked_against_the_requirements():
    assert catalog.choose("aws", "us-east-1", instance_type="g5.xlarge", accelerator="A10G").accelerators == 1
    with pytest.raises(ProvisionError, match="g5.xlarge does not satisfy the pool: it has A10G, not A100"):
        catalog.choose("aws", "us-east-1", instance_type="g5.xlarge", accelerator="A100")


def test_an_unknown_region_is_refused_naming_the_known_ones():
    with pytest.raises(ProvisionError, match="unknown region 'mars-1'.*us-east-1"):
        catalog.choose("aws", "mars-1")


def test_skyhive_launch_plans_the_aws_machine_and_refuses_what_a_provider_cannot_honour(tmp_path):
    from skyhive.runtime.commands.plan import plan_launch
    from skyhive.runtime.commands.taskfile import TaskFileError, loads

    task = loads("num_nodes: 2\nresources: {cloud: aws, accelerators: A100:8}\nrun: echo\n", cwd=str(tmp_path))
    plan = plan_launch(task)
    assert plan.plan["instance_type"] == "p4d.24xlarge" and plan.plan["nodes"] == 2
    assert plan.task.resources.instance_type == "p4d.24xlarge"  # pinned: the pool gets what was shown
    assert plan.provider.instance_type == "p4d.24xlarge"
    assert plan.cost_per_hour == pytest.approx(2 * plan.plan["price_per_hour"])
    assert any(line.startswith("  machines: 2 x p4d.24xlarge in us-east-1") for line in plan.lines)
    # `cpus: 8` is exactly 8 vCPUs (SkyPilot), `8+` at least 8
    exact = plan_launch(loads("resources: {cloud: aws, cpus: 8, memory: 16}\nrun: echo\n", cwd=str(tmp_path)))
    at_least = plan_launch(loads("resources: {cloud: aws, cpus: 8+, memory: 16+}\nrun: echo\n", cwd=str(tmp_path)))
    assert (exact.plan["vcpus"], exact.plan["memory_gb"]) == (8, 16)
    assert at_least.plan["vcpus"] >= 8 and at_least.plan["memory_gb"] >= 16
    # the provider options: each one reaches the provider it is built with
    options = plan_launch(loads("resources: {cloud: aws, region: eu-west-1, zone: eu-west-1b, disk_size: 512, "
                                "image_id: ami-0abc, instance_type: m5.large}\nrun: echo\n", cwd=str(tmp_path)))
    described = options.provider.describe()
    assert {k: described[k] for k in ("region", "zones", "disk_gb", "image", "instance_type")} == \
        {"region": "eu-west-1", "zones": ["eu-west-1b"], "disk_gb": 512, "image": "ami-0abc", "instance_type": "m5.large"}
    assert options.plan["region"] == "eu-west-1"
    ssh = loads("resources: {cloud: ssh, hosts: [h1], use_spot: true, region: eu-west-1}\nrun: echo\n",
                cwd=str(tmp_path))
    with pytest.raises(TaskFileError) as info:
        plan_launch(ssh)
    assert "resources.use_spot (--use-spot): the ssh provider cannot honour it" in str(info.value)
    assert "resources.region (--region eu-west-1): the ssh provider has no such option" in str(info.value)


# ---- Azure: GPU sizes from libcloud's prices and Azure's size tables ------------------------------------


@pytest.mark.parametrize("cloud", ["azure", "gcp", "digitalocean"])
def test_the_shipped_tables_from_csv_are_what_the_generator_makes(cloud):
    from skyhive.providers.cloud.data import generate

    if not generate.catalogs_dir().is_dir():
        pytest.skip(f"no catalog CSVs at {generate.catalogs_dir()} (shared/catalogs beside the repository)")
    shipped = json.loads(resources.files("skyhive.providers.cloud.data").joinpath(f"{cloud}.json").read_text())
    assert generate.BUILDERS[cloud]() == shipped
    assert shipped["sources"]["provenance"] == "shared/catalogs/SOURCES.md"


def test_a_gcp_gpu_price_is_its_host_row_plus_the_accelerator_row_of_the_same_zone():
    table = catalog._table("gcp")["regions"]["us-central1"]
    # gcp_gpu.csv, us-central1-a: a2-highgpu-1g host 0.73948 plus the A100 x1 row 2.93391
    assert table["a2-highgpu-1g"][0] == pytest.approx(3.67339)
    assert table["n1-standard-8+1xT4"][0] == pytest.approx(0.73)
    choice = catalog.choose("gcp", "us-east1", accelerator="T4")
    assert choice.zones and all(z.startswith("us-east1-") for z in choice.zones)


def test_azure_t4_is_the_cheapest_t4_size_of_the_region():
    # (was V100: Azure's NCv3 sizes retired on 2025-09-30 and are no longer in the table, issue 38)
    table = catalog._table("azure")["regions"]["eastus"]
    choice = catalog.choose("azure", "eastus", accelerator="T4", nodes=2)
    t4s = [t for t in table if catalog.instance("azure", t).accelerator == "T4"]
    assert len(t4s) > 1 and choice.instance_type == min(t4s, key=lambda t: (table[t][0], t))
    assert choice.accelerator == "T4" and choice.price_per_hour == table[choice.instance_type][0]
    assert not any(t.endswith("s_v3") for t in table)  # retired NCv3
    assert "Standard_NC6s_v3" in catalog._table("azure")["sources"]["dropped"]
    four = catalog.choose("azure", "westus2", accelerator="T4:4")
    assert (four.instance_type, four.accelerators, four.vcpus) == ("Standard_NC64as_T4_v3", 4, 64)


def test_azure_names_where_an_accelerator_is_offered_and_the_ones_it_knows():
    with pytest.raises(ProvisionError, match=r"no instance type in westus2 has accelerator H100; "
                                             r"H100 is offered \(per node\) in: eastus"):
        catalog.choose("azure", "westus2", accelerator="H100")
    with pytest.raises(ProvisionError, match="offers no accelerator called 'K80' .*known: .*A100.*H100.*T4\\)"):
        catalog.choose("azure", "eastus", accelerator="K80")


def test_the_fakes_catalogs_are_the_shared_ones():
    """The fakes take zones, machines and sizes from tests/cloud/catalogs (so that a fresh clone has them):
    byte-for-byte copies of shared/catalogs, checked wherever that folder is beside the checkout."""
    from tests.cloud.conftest import COPIES, SHARED_CATALOGS

    shared, copies = SHARED_CATALOGS, COPIES
    if not shared.is_dir():
        pytest.skip(f"no shared catalogs at {shared} to compare the copies with (a fresh clone: the copies are used)")
    names = sorted(p.name for p in copies.iterdir() if p.suffix == ".csv")
    assert names == ["aws_gap.csv", "azure_gap.csv", "do.csv", "gcp_gpu.csv"]
    for name in names:
        assert (copies / name).read_bytes() == (shared / name).read_bytes(), f"{name} differs from {shared / name}"
