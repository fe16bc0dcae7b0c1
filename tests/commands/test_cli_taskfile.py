"""Task files (the SkyPilot-compatible subset), their command-line overrides and the provider registry.

No pool runs here: these are the parser's answers, fast.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from skyhive.cli import main
from skyhive.providers import registry
from skyhive.providers.base import Provider, ProvisionError
from skyhive.providers.features import Feature, Features
from skyhive.providers.local import Local
from skyhive.runtime.events.types import PoolStarted, from_json, to_json
from skyhive.runtime.commands.taskfile import TaskFileError, load, loads, parse_env_overrides

FULL = textwrap.dedent("""\
    name: train
    num_nodes: 2
    resources:
      cloud: local
      accelerators: L4:2
      cpus: 8+
      disk_size: 100
    envs:
      EPOCHS: 3
      TOKEN:
    file_mounts:
      /data: .
    setup: pip list
    run: |
      echo one
      echo two
    experimental: {}
""")


def test_full_task_file_parses_with_warnings_for_what_it_does_not_know(tmp_path):
    task = loads(FULL, source="t.yaml", cwd=str(tmp_path))
    assert (task.name, task.num_nodes, task.setup, task.run) == ("train", 2, "pip list", "echo one\necho two\n")
    res = task.resources
    assert (res.provider, res.accelerator, res.accelerator_count, res.cpus, res.cpus_or_more, res.disk_size) == \
        ("local", "L4", 2, 8.0, True, 100)
    assert dict(task.envs) == {"EPOCHS": "3", "TOKEN": None}
    assert [(m.target, m.source) for m in task.file_mounts] == [("/data", str(tmp_path))]
    assert task.warnings == ("t.yaml:17: experimental is not supported by skyhive yet; ignored",)
    # an env var left empty must come from the command line
    with pytest.raises(TaskFileError, match=r"t.yaml:10: envs.TOKEN has no value: pass it with --env TOKEN="):
        task.env()
    assert task.with_overrides(env={"TOKEN": "x"}).env() == {"EPOCHS": "3", "TOKEN": "x"}


@pytest.mark.parametrize("text, message", [
    ("run: echo\nnum_nodes: two\n", r"t.yaml:2: num_nodes: expected a positive whole number, got 'two'"),
    ("run: echo\nnum_nodes: 0\n", r"t.yaml:2: num_nodes: expected a positive whole number"),
    ("resources:\n  accelerators: L4:x\nrun: echo\n", r"t.yaml:2: resources.accelerators: expected NAME or NAME:COUNT"),
    ("resources:\n  cpus: lots\nrun: echo\n", r"t.yaml:2: resources.cpus: expected a CPU count like 8 or 8\+"),
    ("resources:\n  cpus: 4GB\nrun: echo\n", r"t.yaml:2: resources.cpus: expected a CPU count like 8 or 8\+"),
    ("resources:\n  memory: -3\nrun: echo\n", r"t.yaml:2: resources.memory: expected a memory size in GB like 32"),
    ("resources:\n  use_spot: maybe\nrun: echo\n", r"t.yaml:2: resources.use_spot: expected true or false"),
    ("resources:\n  disk_size: big\nrun: echo\n", r"t.yaml:2: resources.disk_size: expected a positive whole"),
    ("resources:\n  accelerators: A100:1.5\nrun: echo\n", r"t.yaml:2: resources.accelerators: a fractional accelerator count must be under 1"),
    ("file_mounts:\n  /data: s3://Bad_Bucket/x\nrun: echo\n",
     r"t.yaml:2: file_mounts./data: 'Bad_Bucket' is not a valid bucket name"),
    ("file_mounts:\n  /ckpt:\n    source: gs://gb-bucket\n    mode: SYNC\nrun: echo\n",
     r"t.yaml:3: file_mounts./ckpt.*mode='SYNC'.*COPY, MOUNT, MOUNT_CACHED"),
    ("file_mounts:\n  /ckpt:\n    name: ok-bucket\n    source: ./no-such-dir\nrun: echo\n",
     r"t.yaml:3: file_mounts./ckpt.source: './no-such-dir' does not exist"),
    ("file_mounts:\n  /data: az://container/x\nrun: echo\n",
     r"t.yaml:2: file_mounts./data: az://container/x: this kind of storage is not supported"),
    ("file_mounts:\n  /data: ./no-such-dir\nrun: echo\n",
     r"t.yaml:2: file_mounts./data: the source './no-such-dir' does not exist"),
    ("resources:\n  cloud: mainframe\nrun: echo\n", r"t.yaml:2: resources.cloud: unknown provider 'mainframe'"),
    ("run:\n  - echo a\n  - echo b\n", r"t.yaml:2: run: expected a shell script"),
    ("envs:\n  9LIVES: x\nrun: echo\n", r"t.yaml:2: envs.9LIVES: not a valid environment variable name"),
    ("workdir: no/such/dir\nrun: echo\n", r"t.yaml:1: workdir: 'no/such/dir' is not a directory"),
    ("name: train\nrun: [echo\n", r"t.yaml:3:1: not valid YAML"),
    ("name: a\n  b: c\n", r"t.yaml:2:4: not valid YAML: mapping values are not allowed here"),
    ("- just\n- a list\n", r"t.yaml:1: \(top level\): the task file must be a mapping"),
    ("", r"t.yaml: the task file is empty"),
])
def test_malformed_task_files_name_field_and_line(tmp_path, text, message):
    with pytest.raises(TaskFileError, match=message):
        loads(text, source="t.yaml", cwd=str(tmp_path))


def test_cli_reports_a_malformed_file_and_exits_2_without_starting_anything(tmp_path, capsys, skyhive_home):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nnum_nodes: 2\nresources:\n  accelerators: [1, 2]\nrun: echo\n")
    assert main(["launch", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"skyhive: error: {path}:4: resources.accelerators: expected NAME or NAME:COUNT" in err
    assert not (Path(skyhive_home) / "pools").exists()  # no pool was started


def test_accelerator_forms_and_relative_workdir(tmp_path):
    (tmp_path / "code").mkdir()
    assert loads("resources: {accelerators: {A100: 8}}", cwd=str(tmp_path)).resources.accelerator_count == 8
    assert loads("resources: {accelerators: T4}", cwd=str(tmp_path)).resources.accelerator_count == 1
    task = loads("resources: {infra: aws/us-east-1}\nworkdir: code\nrun: x", cwd=str(tmp_path))
    assert task.resources.provider == "aws"
    assert task.workdir == str(tmp_path / "code")  # relative to where skyhive runs, as in SkyPilot


def test_command_line_overrides_win(tmp_path, monkeypatch):
    path = tmp_path / "t.yaml"
    path.write_text("num_nodes: 4\nresources: {cloud: aws}\nenvs: {A: file, B: file}\nsecrets: {S: one}\nrun: x\n")
    task = load(path, cwd=str(tmp_path))
    monkeypatch.setenv("B", "from-here")
    env = parse_env_overrides(["A=cli", "B", "S=two"])
    task = task.with_overrides(nodes=2, provider="ssh", hosts=("h1", "h2"), env=env)
    assert task.num_nodes == 2
    assert (task.resources.provider, task.resources.hosts) == ("ssh", ("h1", "h2"))
    assert task.env() == {"A": "cli", "B": "from-here"}
    assert task.secret_env() == {"S": "two"}  # a secret stays a secret when overridden
    with pytest.raises(TaskFileError, match="--env NOPE: no value given"):
        parse_env_overrides(["NOPE"], environ={})
    with pytest.raises(TaskFileError, match="--provider: unknown provider 'nomad'"):
        task.with_overrides(provider="nomad")


class FakeSSH(Provider):
    """Stands in for `sky.SSH` to check what the registry passes it (it declares, as `sky.SSH` does, that
    it runs on the hosts the user names: what `--hosts` is given to)."""

    name = "ssh"
    features = Features(Feature.KEEP, Feature.HOSTS)

    def __init__(self, hosts, key=None):
        self.hosts, self.key = list(hosts), key

    async def launch(self, spec, nodes):
        raise NotImplementedError

    async def terminate(self, handles):
        return None

    def describe(self):
        return {"provider": "ssh", "hosts": self.hosts, "key": self.key}


def test_registry_builds_providers_from_the_cli_and_from_their_description(monkeypatch):
    assert isinstance(registry.from_cli("local"), Local)
    assert isinstance(registry.from_description(Local().describe()), Local)
    monkeypatch.setitem(registry.PROVIDERS, "ssh", (__name__, "FakeSSH"))
    ssh = registry.from_cli("ssh", hosts=["head", "worker"])
    assert isinstance(ssh, FakeSSH) and ssh.hosts == ["head", "worker"]
    again = registry.from_description(ssh.describe())
    assert isinstance(again, FakeSSH) and (again.hosts, again.key) == (["head", "worker"], None)
    with pytest.raises(ProvisionError, match="the ssh provider needs hosts"):
        registry.from_cli("ssh")
    with pytest.raises(ProvisionError, match="--hosts is for the ssh provider"):
        registry.from_cli("local", hosts=["h"])
    monkeypatch.setitem(registry.PROVIDERS, "aws", ("skyhive.providers.no_such_module", "AWS"))
    with pytest.raises(ProvisionError, match="provider 'aws' is not available in this install"):
        registry.from_cli("aws")


def test_pool_started_records_the_provider_description():
    ev = PoolStarted(pool_id="p", seq=0, ts=1.5, provider="ssh", nodes=2, processes_per_node=1, pid=7,
                     host="h", provider_config={"provider": "ssh", "hosts": ["a", "b"], "key": None})
    assert from_json(to_json(ev)) == ev
    old = '{"pool_id":"p","seq":0,"ts":1.5,"provider":"local","nodes":1,"processes_per_node":1,' \
          '"pid":7,"host":"h","type":"pool_started"}'
    assert from_json(old).provider_config == {}  # logs written before the field still read


def test_cli_provider_errors_are_one_clear_line(tmp_path, capsys, monkeypatch, skyhive_home):
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "t.yaml", "--provider", "ssh"]) == 1
    assert capsys.readouterr().err == \
        "skyhive: error: the ssh provider needs hosts: pass --hosts HOST [HOST ...] (head first)\n"
    monkeypatch.setitem(registry.PROVIDERS, "aws", ("skyhive.providers.no_such_module", "AWS"))
    assert main(["launch", "t.yaml", "--provider", "aws"]) == 1
    assert "provider 'aws' is not available in this install" in capsys.readouterr().err
    assert not (Path(skyhive_home) / "pools").exists()  # no pool was started


def test_file_mounts_take_the_tasks_envs_and_follow_env_overrides(tmp_path):
    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    text = "envs: {SIZE: small}\nsecrets: {TOKEN: t0k}\nfile_mounts:\n  /data/$SIZE: ./${SIZE}\nrun: echo\n"
    task = loads(text, source="t.yaml", cwd=str(tmp_path))
    assert [(m.target, m.source) for m in task.file_mounts] == [("/data/small", str(tmp_path / "small"))]
    bigger = task.with_overrides(env={"SIZE": "large"})  # `--env SIZE=large` moves the mount with it
    assert [(m.target, m.source) for m in bigger.file_mounts] == [("/data/large", str(tmp_path / "large"))]
    with pytest.raises(TaskFileError, match=r"t.yaml:4: file_mounts./data/\$SIZE: the source './\$\{SIZE\}' does not "
                                            r"exist \(.*/huge;"):
        task.with_overrides(env={"SIZE": "huge"})
    # secrets are not file_mounts variables (as in SkyPilot): ${TOKEN} stays as written
    with pytest.raises(TaskFileError, match=r"does not exist \(.*/\$\{TOKEN\};"):
        loads("secrets: {TOKEN: t0k}\nfile_mounts:\n  /d: ./${TOKEN}\nrun: echo\n", source="t.yaml",
              cwd=str(tmp_path))
