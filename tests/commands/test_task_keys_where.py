"""Task keys that change where or how long a task runs are honoured or refused (exit 2 naming the key and
what to do), never warned about and then ignored (issue 39, point 1): `resources.any_of` / `ordered` /
several `accelerators` become offers to search, `resources.autostop` a named pool's autostop, and the
keys skyhive cannot honour (`service`, `pool`, `resources.network_tier`, ...) are refused.

SkyPilot's own spellings, from its YAML reference (docs/source/reference/yaml-spec.rst)."""

from __future__ import annotations

import textwrap

import pytest

from skyhive.cli import main
from skyhive.providers.fallback import Fallback
from skyhive.providers.local import Local
from skyhive.runtime.commands.resources import provider_for
from skyhive.runtime.commands.taskfile import Autostop, TaskFileError, loads
from tests.clusters.test_clusters import clean  # noqa: F401


def _task(text: str):  # type: ignore[no-untyped-def]
    return loads(textwrap.dedent(text), source="t.yaml")


@pytest.mark.parametrize("spelling, expected", [
    ("autostop: true", Autostop(idle_minutes=5)),
    ("autostop: 10m", Autostop(idle_minutes=10)),
    ("autostop: 30", Autostop(idle_minutes=30)),
    ("autostop: 1h", Autostop(idle_minutes=60)),
    ("autostop: {idle_minutes: 10, down: true}", Autostop(idle_minutes=10, down=True)),
    ("autostop: {idle_minutes: 10, hook: 'echo bye', hook_timeout: 300}",
     Autostop(idle_minutes=10, hook="echo bye", hook_timeout=300)),
    ("autostop: false", None),
])
def test_autostop_spellings_are_read(spelling, expected):
    task = _task(f"resources:\n  {spelling}\nrun: echo hi\n")
    assert task.resources.autostop == expected
    assert not task.warnings


@pytest.mark.parametrize("spelling, says", [
    ("autostop: soon", "resources.autostop: expected a positive number of minutes"),
    ("autostop: {idle_minutes: 0}", "resources.autostop.idle_minutes: expected a positive number"),
    ("autostop: {idle_minutes: 5, wait_for: ssh}", "resources.autostop.wait_for: expected one of jobs_and_ssh, jobs, none"),
    ("autostop: {down: maybe}", "resources.autostop.down: expected true or false"),
])
def test_a_wrong_autostop_is_an_error_naming_it(spelling, says):
    with pytest.raises(TaskFileError, match=says.replace(".", r"\.")):
        _task(f"resources:\n  {spelling}\nrun: echo hi\n")


def test_any_of_and_ordered_are_offers_with_the_entry_over_the_task(tmp_path):
    task = _task("""\
        resources:
          cpus: 4+
          any_of:
            - infra: aws/us-west-2
              accelerators: H100
            - infra: gcp/us-central1
              accelerators: H100
        run: nvidia-smi
        """)
    res = task.resources
    assert res.order == "price" and len(res.alternatives) == 2
    first, second = res.alternatives
    assert (first.provider, first.region, first.accelerator, first.cpus, first.cpus_or_more) == \
        ("aws", "us-west-2", "H100", 4, True)
    assert (second.provider, second.region) == ("gcp", "us-central1")
    ordered = _task("""\
        resources:
          accelerators: A100:8
          ordered:
            - infra: aws/us-east-1
            - infra: aws/us-west-2
        run: nvidia-smi
        """).resources
    assert ordered.order == "given"
    assert [(a.region, a.accelerator, a.accelerator_count) for a in ordered.alternatives] == \
        [("us-east-1", "A100", 8), ("us-west-2", "A100", 8)]
    several = _task("resources:\n  accelerators: [A100, H100]\nrun: x\n").resources
    assert several.order == "given" and [a.accelerator for a in several.alternatives] == ["A100", "H100"]
    either = _task("resources:\n  accelerators: {A100: 1, H100: 1}\nrun: x\n").resources
    assert either.order == "price" and [a.accelerator for a in either.alternatives] == ["A100", "H100"]


def test_any_of_over_clouds_is_a_search_never_local(monkeypatch):
    """What the issue saw: H100 through `any_of` on aws/gcp ran locally without a GPU. Now it is the offer
    search (one offer per region of each cloud that has it), cheapest first; `ordered` keeps its order."""
    task = _task("""\
        resources:
          any_of:
            - infra: aws/us-east-1
              accelerators: A100:8
            - infra: gcp/us-central1
              accelerators: A100:8
        run: nvidia-smi
        """)
    provider = provider_for(task)
    assert isinstance(provider, Fallback) and not isinstance(provider, Local)
    assert provider.order == "price"
    assert [(p.name, p.describe()["region"]) for p in provider.providers] == [("aws", "us-east-1"),
                                                                              ("gcp", "us-central1")]
    ordered = provider_for(_task("""\
        resources:
          accelerators: A100:8
          ordered:
            - infra: gcp/us-central1
            - infra: aws
        run: nvidia-smi
        """))
    assert isinstance(ordered, Fallback) and ordered.order == "given"
    clouds = [p.name for p in ordered.providers]
    assert clouds[0] == "gcp" and set(clouds[1:]) == {"aws"} and len(clouds) > 2  # AWS: every region offering it


def test_an_offer_that_cannot_be_made_is_an_error_naming_the_entry(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text(textwrap.dedent("""\
        resources:
          any_of:
            - infra: aws/us-east-1
              accelerators: A100:8
            - infra: gcp/us-central1
              accelerators: NoSuchGPU:1
        run: nvidia-smi
        """))
    assert main(["launch", str(tmp_path / "t.yaml"), "--dryrun"]) == 2
    err = capsys.readouterr().err
    assert "resources.any_of[1]" in err and "NoSuchGPU" in err


@pytest.mark.parametrize("text, key", [
    ("service:\n  replicas: 2\nrun: python serve.py\n", "service"),
    ("pool:\n  workers: 2\nrun: x\n", "pool"),
    ("resources:\n  network_tier: best\nrun: x\n", "resources.network_tier"),
    ("resources:\n  max_hourly_cost: 10.0\nrun: x\n", "resources.max_hourly_cost"),
    ("resources:\n  accelerator_args: {runtime_version: tpu-vm-base}\nrun: x\n", "resources.accelerator_args"),
    ("resources:\n  any_of:\n    - infra: aws\n      network_tier: best\nrun: x\n", "resources.any_of[0].network_tier"),
])
def test_keys_that_change_where_or_how_long_are_refused_with_exit_2(tmp_path, capsys, text, key):
    (tmp_path / "t.yaml").write_text(text)
    assert main(["launch", str(tmp_path / "t.yaml"), "--dryrun"]) == 2
    err = capsys.readouterr().err
    assert f"{key}: not supported" in err and "remove the key to run" in err and "warning" not in err


def test_autostop_without_a_named_pool_is_refused(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("resources:\n  autostop: 10m\nrun: echo hi\n")
    assert main(["launch", "-y", str(tmp_path / "t.yaml")]) == 2
    err = capsys.readouterr().err
    assert "resources.autostop" in err and "add -c NAME" in err


def test_offers_on_a_named_pool_are_refused(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("resources:\n  ordered:\n    - infra: local\n    - infra: local\nrun: echo hi\n")
    assert main(["launch", "-y", "-c", "offers", str(tmp_path / "t.yaml")]) == 2
    assert "a named pool is kept on one" in capsys.readouterr().err


def test_autostop_on_a_managed_job_is_refused(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("resources:\n  autostop: {idle_minutes: 10, down: true}\nrun: echo hi\n")
    assert main(["jobs", "launch", "-y", str(tmp_path / "t.yaml")]) == 2
    err = capsys.readouterr().err
    assert "resources.autostop: a managed job's pools are taken down when the job ends" in err


def test_an_autostop_hook_where_the_watchdog_runs_no_hook_is_refused(tmp_path, skyhive_home):
    """Kubernetes pods run the pool's autostop in a watchdog of their own, which runs no hook: refused (exit 2
    from the CLI, a LaunchError naming the key and why) before anything is made, never a hook that silently
    does not run. (SSH hosts and cloud machines run it: tests/clusters/test_ssh_autostop_hook.py.)"""
    from pathlib import Path

    from skyhive.errors import LaunchError
    from skyhive.providers.kubernetes import Kubernetes
    from skyhive.runtime.commands.taskfile import loads
    from skyhive.runtime.control.pools import launch_cluster

    task = loads("resources:\n  autostop: {idle_minutes: 10, hook: 'echo save'}\nrun: echo hi\n", cwd=str(tmp_path))
    with pytest.raises(LaunchError, match=r"resources.autostop.hook: the pool's autostop runs in its pods' own "
                                          r"watchdog, which runs no hook yet"):
        launch_cluster(task, "hooked", provider=Kubernetes())
    assert not (Path(skyhive_home) / "clusters" / "hooked" / "record.json").exists()


@pytest.mark.parametrize("value", ["jobs", "none"])
def test_a_wait_for_where_the_watchdog_runs_on_the_machines_is_refused(tmp_path, capsys, skyhive_home, value):
    """`wait_for: jobs|none` is honoured where the watchdog runs beside the pool's job queue (Local); on SSH
    hosts and cloud machines it is refused before anything is made (issue 39: honoured or refused)."""
    (tmp_path / "t.yaml").write_text(f"resources:\n  autostop: {{idle_minutes: 10, wait_for: {value}}}\nrun: echo hi\n")
    code = main(["launch", "-y", "-c", "waits", str(tmp_path / "t.yaml"), "--provider", "ssh", "--hosts", "127.0.0.1"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"resources.autostop.wait_for: {value}: on SSH hosts and cloud machines" in err and "jobs_and_ssh" in err
    from pathlib import Path

    assert not (Path(skyhive_home) / "clusters" / "waits" / "record.json").exists()


def test_several_accelerators_without_cloud_credentials_stay_local_as_one_does(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_TENANT_ID",
                 "DIGITALOCEAN_ACCESS_TOKEN", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    assert isinstance(provider_for(_task("resources:\n  accelerators: [L4, T4]\nrun: x\n")), Local)
    assert isinstance(provider_for(_task("resources:\n  accelerators: L4\nrun: x\n")), Local)


def test_skypilots_accelerator_list_on_a_named_pool_with_infra_local_runs_with_advice(clean, capsys):
    """SkyPilot's tests/test_yamls/test_list_null_accelerators.yaml (verbatim in skypilot_yamls/, from
    skypilot-org/skypilot; `accelerators: [T4: 1, V100: null]`, candidates) launched as its smoke test does,
    with `--infra local`: SkyPilot filters the candidates to the infra given, and on Local accelerators are
    advice, so the pool runs with Local's warning (it was refused, asking to name the infra it was given)."""
    from pathlib import Path

    from skyhive.runtime.clusters import record as records

    yaml = Path(__file__).parent / "skypilot_yamls" / "test_list_null_accelerators.yaml"
    assert main(["launch", "-y", "-c", "nulls", "--infra", "local", str(yaml)]) == 0
    out, err = capsys.readouterr()
    assert "Null should default to 1" in out and "search offers on several providers" not in err
    assert "accelerator='T4' was asked for" in err  # the first candidate, as advice: Local warns
    assert records.load("nulls").spec["provider"] == "local"
    assert main(["down", "-y", "nulls"]) == 0
    assert "nulls" not in records.names()


def test_an_accelerator_list_on_a_named_pool_without_infra_is_still_refused(tmp_path, capsys):
    """Without --infra nothing narrows the candidates to one provider: refused as before, naming what to do."""
    (tmp_path / "t.yaml").write_text("resources:\n  accelerators: [T4, V100]\nrun: echo hi\n")
    assert main(["launch", "-y", "-c", "offers", str(tmp_path / "t.yaml")]) == 2
    assert "a named pool is kept on one" in capsys.readouterr().err
