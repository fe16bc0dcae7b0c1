"""The AWS machine table merged with ../shared/catalogs/aws_gap.csv (types and zones moto ∩ libcloud lacked,
spot prices, each row's source, gaps said not guessed), the default image by GPU generation, and the
login user. No cloud is called (the dry run and the public-address lookup are in test_cloud_aws_network)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from skyhive.providers.base import ProvisionError
from skyhive.providers.cloud import aws_images, catalog
from skyhive.providers.cloud.aws import vcpu_quota
from skyhive.providers.cloud.data import generate


def test_t4_in_us_east_2_is_the_cheapest_g4dn_xlarge():
    choice = catalog.choose("aws", "us-east-2", accelerator="T4")
    assert (choice.instance_type, choice.price_per_hour, choice.price_source) == ("g4dn.xlarge", 0.526,
                                                                                 "skypilot-catalog")


@pytest.mark.parametrize(("region", "gpu", "itype"), [
    ("us-east-1", "V100:1", "p3.2xlarge"), ("us-east-1", "V100:8", "p3.16xlarge"), ("us-west-2", "A10G", "g5.xlarge"),
    ("us-east-2", "L4", "g6.xlarge"), ("us-east-1", "A100:8", "p4d.24xlarge"), ("us-east-1", "H100:1", "p5.4xlarge"),
    ("us-east-1", "L40S", "g6e.xlarge"), ("eu-west-1", "V100:1", "p3.2xlarge"),
])
def test_the_catalog_fills_the_gpu_types_the_first_sources_lacked(region, gpu, itype):
    assert catalog.choose("aws", region, accelerator=gpu).instance_type == itype


def test_a_spot_pool_is_priced_at_the_spot_price_before_launch():
    choice = catalog.choose("aws", "us-west-2", accelerator="A10G", spot=True, nodes=2)
    assert choice.spot_price_per_hour is not None and choice.spot_price_per_hour < choice.price_per_hour
    assert choice.cost_per_hour == pytest.approx(2 * choice.spot_price_per_hour)
    assert f"${choice.spot_price_per_hour:.4g}/h spot" in choice.summary()
    on_demand = catalog.choose("aws", "us-west-2", accelerator="A10G", nodes=2)
    assert on_demand.cost_per_hour == pytest.approx(2 * on_demand.price_per_hour)


def test_every_row_says_its_source_and_the_gaps_are_listed_not_guessed():
    table = json.loads(resources.files("skyhive.providers.cloud.data").joinpath("aws.json").read_text())
    rows = [row for regional in table["regions"].values() for row in regional.values()]
    assert {row[3] for row in rows} <= {"libcloud", "skypilot-catalog", "none"}
    assert sum(row[3] == "skypilot-catalog" for row in rows) == 87  # (type, region) pairs of aws_gap.csv with a price
    assert "p5e.48xlarge in us-east-2: the catalog lists it without an on-demand price" in table["sources"]["gaps"]
    choice = catalog.choose("aws", "us-east-2", instance_type="p5e.48xlarge")
    assert choice.price_per_hour is None and "price unknown" in choice.summary()
    assert choice.accelerator == "H200" and choice.accelerators == 8
    with pytest.raises(ProvisionError, match="no instance type in eu-west-1 has accelerator H100"):
        catalog.choose("aws", "eu-west-1", accelerator="H100")  # a gap of the catalog: not offered, not guessed


def _catalogs() -> Path | None:
    path = generate.catalogs_dir() / "aws_gap.csv"
    return path if path.exists() else None


def _shipped() -> dict:
    return json.loads(resources.files("skyhive.providers.cloud.data").joinpath("aws.json").read_text())


def _locked(name: str) -> str:
    """The version requirements/test.lock pins `name` at."""
    lock = Path(__file__).resolve().parents[2] / "requirements" / "test.lock"
    (version,) = [line.split("==", 1)[1].strip() for line in lock.read_text().splitlines()
                  if line.lower().startswith(f"{name}==")]
    return version


def test_the_table_is_made_from_the_locked_versions_of_its_inputs():
    """The table moves with the lock, never with what the registry serves today: its two package inputs are
    the versions requirements/test.lock pins (the third, aws_gap.csv, is data the repository's shared/
    carries with its provenance)."""
    sources = _shipped()["sources"]
    assert (sources["moto"], sources["apache-libcloud"]) == (_locked("moto"), _locked("apache-libcloud"))


@pytest.mark.skipif(_catalogs() is None, reason="../shared/catalogs/aws_gap.csv is not beside this checkout")
def test_the_shipped_table_is_what_the_generator_makes():
    import libcloud
    import moto

    shipped = _shipped()
    made_from = (shipped["sources"]["moto"], shipped["sources"]["apache-libcloud"])
    if (moto.__version__, libcloud.__version__) != made_from:
        pytest.fail(f"aws.json was made from moto {made_from[0]} and apache-libcloud {made_from[1]}, this "
                    f"environment has moto {moto.__version__} and apache-libcloud {libcloud.__version__}: the "
                    "generator's inputs moved (`python3 dev.py test` installs the locked ones). To move the "
                    "table on purpose: `python -m skyhive.providers.cloud.data.generate` with the new lock, "
                    "and commit both")
    assert json.loads(json.dumps(generate.build())) == shipped


@pytest.mark.parametrize(("gpu", "image"), [("V100", "gpu-proprietary"), ("M60", "gpu-proprietary"),
                                            ("T4", "gpu-oss"), ("A10G", "gpu-oss"), ("L4", "gpu-oss"),
                                            ("A100", "gpu-oss"), ("H100", "gpu-oss"), (None, "cpu")])
def test_the_default_image_by_gpu_generation(gpu, image):
    assert aws_images.default_image(gpu) is aws_images.IMAGES[image]


def test_a_v100_boots_the_proprietary_driver_line_whose_release_notes_list_p3_and_logs_in_as_ec2_user():
    """AWS's DLAMI release notes list P3/P3dn and G3 as supported only by the Amazon Linux 2 line of the
    proprietary-driver Deep Learning Base AMI (Version 71.6, 2026-01-02); the Ubuntu 20.04 line named before
    is gone with Ubuntu 20.04."""
    spec = aws_images.default_image("V100")
    assert spec.name == "Deep Learning Base Proprietary Nvidia Driver AMI (Amazon Linux 2) Version *"
    assert (spec.owner, spec.user) == ("amazon", "ec2-user")
    assert aws_images.default_image("V100-32GB") is spec


def test_k80_has_no_default_image_and_says_to_pass_one():
    with pytest.raises(ValueError, match="no default image drives K80 .*pass image="):
        aws_images.default_image("K80")


@pytest.mark.parametrize(("name", "user"), [("ubuntu/images/hvm-ssd/ubuntu-jammy-22.04", "ubuntu"),
                                            ("al2023-ami-2023.6", "ec2-user"), ("amzn2-ami-hvm", "ec2-user"),
                                            ("debian-12-amd64", "admin"), ("something-else", "ubuntu"),
                                            # the OS a Deep Learning AMI runs decides, not "deep learning"
                                            ("Deep Learning Base Proprietary Nvidia Driver AMI (Amazon Linux 2) "
                                             "Version 71.6", "ec2-user"),
                                            ("Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261006",
                                             "ubuntu"), ("Deep Learning AMI GPU PyTorch 2.9", "ubuntu")])
def test_the_login_user_follows_the_image_name(name, user):
    assert aws_images.user_for_image(name) == user


def test_the_quota_is_named_by_family():
    assert vcpu_quota("p4d.24xlarge", spot=False) == ("Running On-Demand P instances", "L-417A185B")
    assert vcpu_quota("g5.xlarge", spot=True) == ("All G and VT Spot Instance Requests", "L-3819A6DF")
    assert vcpu_quota("c5.large", spot=False)[1] == "L-1216C47A"
    assert vcpu_quota("inf2.xlarge", spot=False)[1] == "L-1945791B"
