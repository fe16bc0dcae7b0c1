"""Small wrong or contradictory output (issue 39 point 6), each as the user met it: `skyhive check` with no
cloud's credentials, `skyhive storage ls` without boto3, the counts of `stop`/`down`, a spot dry run's
hourly cost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skyhive.cli import main
from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture: named pools down, nothing left
from tests.commands.test_cli_launch import SKYHIVE, skyhive

CLOUD_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE",
             "AWS_SHARED_CREDENTIALS_FILE", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "AZURE_CLIENT_ID",
             "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_SUBSCRIPTION_ID", "DIGITALOCEAN_ACCESS_TOKEN")


def test_check_with_no_cloud_credentials_prints_the_table_and_exits_0_as_skypilots(tmp_path, skyhive_home):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in CLOUD_ENV and not k.startswith(("AWS_", "AZURE_"))}
    env["HOME"] = str(home)  # no ~/.aws, ~/.config/gcloud, ~/.azure
    env["AWS_EC2_METADATA_DISABLED"] = "true"  # botocore's chain would ask the instance metadata address
    done = subprocess.run([*SKYHIVE, "check"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for cloud in ("aws", "gcp", "azure", "digitalocean"):
        assert f"{cloud}:\n" in done.stdout
    assert "ranks offers of: none (runs locally)" in done.stdout


def test_storage_ls_without_boto3_says_so_and_not_that_there_are_no_buckets(tmp_path, skyhive_home):
    shadow = tmp_path / "shadow" / "boto3"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'boto3'\")\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow"), "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing"}
    done = subprocess.run([*SKYHIVE, "storage", "ls", "--store", "s3"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "boto3" in done.stderr
    assert "no buckets" not in done.stdout, done.stdout  # it could not look: it does not know


def test_stop_and_down_count_processes_in_english(tmp_path, clean):
    (tmp_path / "t.yaml").write_text("run: echo up\n")
    assert skyhive("launch", "-y", "-c", "one", "t.yaml", cwd=tmp_path).returncode == 0
    stopped = skyhive("stop", "-y", "one", cwd=tmp_path)
    down = skyhive("down", "-y", "one", cwd=tmp_path)
    for done in (stopped, down):
        assert done.returncode == 0, done.stderr
        said = re.search(r"\((\d+) (process|processes) ended", done.stderr)
        assert said is not None, done.stderr
        assert (said.group(2) == "process") == (said.group(1) == "1"), done.stderr


@pytest.mark.loopback_only
def test_a_spot_dry_run_prices_the_pool_at_the_spot_price_it_shows(moto_ec2, tmp_path, capsys, skyhive_home,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("t.yaml").write_text("resources:\n  cloud: aws\n  accelerators: L4:1\nrun: nvidia-smi\n")
    assert main(["launch", "t.yaml", "--dryrun", "--use-spot"]) == 0
    out = capsys.readouterr().out
    spot = re.search(r"\$([\d.]+)/h spot", out)
    assert spot is not None, out
    assert f"hourly cost: ${spot.group(1)}/h for the pool (spot prices)" in out, out
    assert "on-demand prices" not in out
    assert main(["launch", "t.yaml", "--dryrun"]) == 0
    out = capsys.readouterr().out
    assert "(on-demand prices)" in out and "spot" not in out


def _fails(tag: str) -> None:
    raise ValueError(f"bad {tag}")


def test_a_task_error_says_which_node_raised_it():
    import skyhive as sky

    with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        with pytest.raises(ValueError, match="bad one") as one:
            pool.run(_fails, "one")
        assert one.value.node in (0, 1)
        with pytest.raises(ValueError, match="bad all") as every:
            pool.broadcast(_fails, "all")
        assert every.value.node in (0, 1)
        assert f"from node {every.value.node}" in "".join(every.value.__notes__)


def test_a_named_pools_timeline_after_stop_and_start_shows_it_up_and_the_stop_as_a_stop(tmp_path, clean):
    from skyhive.runtime.events.inventory import LogTail, find
    from skyhive.runtime.events.timeline import build

    (tmp_path / "t.yaml").write_text("run: echo up\n")
    assert skyhive("launch", "-y", "-c", "tl", "t.yaml", cwd=tmp_path).returncode == 0
    assert skyhive("stop", "-y", "tl", cwd=tmp_path).returncode == 0
    assert skyhive("start", "-y", "tl", cwd=tmp_path).returncode == 0
    drawn = skyhive("timeline", "tl", "-o", "tl.html", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    html = (tmp_path / "tl.html").read_text()
    assert "still running at the last event" in html and "cleaned up by skyhive down" not in html
    tl = build(LogTail(find("tl").path).events())
    assert not tl.stopped
    spans = [s for lane in tl.lanes for s in lane.spans]
    assert all(s.end >= s.start for s in spans), [s for s in spans if s.end < s.start]
    assert any(s.label == "skyhive stop tl" for s in spans), spans  # the stop, drawn as what it was


def test_ls_age_counts_from_a_named_pools_first_start_not_its_latest(tmp_path, clean):
    import json

    (tmp_path / "t.yaml").write_text("run: echo up\n")
    assert skyhive("launch", "-y", "-c", "old", "t.yaml", cwd=tmp_path).returncode == 0

    def row() -> dict:
        listed = skyhive("ls", "-a", "--json", cwd=tmp_path)
        return next(r for r in map(json.loads, listed.stdout.splitlines()) if r["pool"] == "old")

    first = row()
    assert skyhive("stop", "-y", "old", cwd=tmp_path).returncode == 0
    assert skyhive("start", "-y", "old", cwd=tmp_path).returncode == 0
    assert skyhive("exec", "old", "t.yaml", cwd=tmp_path).returncode == 0  # attaches: another start in the log
    after = row()
    assert after["started"] > first["started"]  # the latest start moved on
    assert after["created"] == first["created"] <= first["started"]  # the age did not
