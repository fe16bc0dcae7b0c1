"""The audit's rewrite rules (bench/audit/rewrite.py) do only what they say: no other byte of a program changes."""

from __future__ import annotations

import difflib

import pytest

from bench.audit.rewrite import rewrite_command, rewrite_python, rewrite_yaml

GUIDE = '''"""Hello, Skyward! — skyward runs this on the cloud."""

import skyward as sky
from skyward.accelerators import A100
from skyward import plugins

NAME = "skyward"  # import skyward in a string stays


@sky.function
def add(a: int, b: int) -> int:
    return a + b


if __name__ == "__main__":
    with sky.ComputePool(
        sky.Spec(provider=sky.VastAI(region="us", max_price=2.0), accelerator=A100()),
        sky.Spec(provider=sky.AWS(), accelerator=A100()),
        provider=sky.Container(image=sky.Image(pip=["torch"])),
        nodes=2,
    ) as pool:
        print(add(2, 3) >> pool, sky.Local(), sky.Image(pip=["x"]))
'''


def _changed(old: str, new: str) -> list[tuple[str, str]]:
    """(removed line, added line) pairs: the rules only ever rewrite within a line."""
    a, b = old.splitlines(), new.splitlines()
    assert len(a) == len(b), "a rule added or removed lines"
    return [(x, y) for x, y in zip(a, b) if x != y]


def test_python_rules_change_only_the_imports_and_the_cloud_calls():
    new, applied = rewrite_python(GUIDE)
    assert applied == ["import skyward → import skyhive ×3", "cloud → sky.Local() ×3"]
    assert _changed(GUIDE, new) == [
        ("import skyward as sky", "import skyhive as sky"),
        ("from skyward.accelerators import A100", "from skyhive.accelerators import A100"),
        ("from skyward import plugins", "from skyhive import plugins"),
        ('        sky.Spec(provider=sky.VastAI(region="us", max_price=2.0), accelerator=A100()),',
         "        sky.Spec(provider=sky.Local(), accelerator=A100()),"),
        ("        sky.Spec(provider=sky.AWS(), accelerator=A100()),",
         "        sky.Spec(provider=sky.Local(), accelerator=A100()),"),
        ('        provider=sky.Container(image=sky.Image(pip=["torch"])),', "        provider=sky.Local(),"),
    ]
    # the docstring, the string constant, sky.Local() and sky.Image(...) elsewhere are untouched
    assert '"""Hello, Skyward! — skyward runs this on the cloud."""' in new
    assert 'NAME = "skyward"  # import skyward in a string stays' in new


def test_python_rules_leave_a_program_without_skyward_alone():
    source = "import skyhive as sky\nprint(sky.AWS())  # not Skyward's module: not a Skyward cloud\n"
    assert rewrite_python(source) == (source, [])


def test_python_cloud_imported_by_name_becomes_local_and_the_module_is_imported():
    source = "from skyward import AWS, function\n\npool = dict(provider=AWS(region='x'))\n"
    new, applied = rewrite_python(source)
    assert new == "import skyhive\nfrom skyhive import AWS, function\n\npool = dict(provider=skyhive.Local())\n"
    assert applied == ["import skyward → import skyhive ×1", "cloud → skyhive.Local() ×1"]


def test_python_rule_needs_a_parsable_program():
    with pytest.raises(SyntaxError):
        rewrite_python("import skyward as sky\ndef broken(:\n")


def test_yaml_rule_changes_only_cloud_and_infra_values():
    text = ("resources:\n  cloud: aws\n  infra: gcp/us-central1  # pinned\n  any_of:\n    - cloud: aws\n"
            "    - infra: local\n  accelerators: A100:8\nrun: |\n  echo cloud: aws\n  sky launch x\n")
    new, applied = rewrite_yaml(text)
    assert applied == ["cloud/infra → local ×3"]
    diff = [line for line in difflib.ndiff(text.splitlines(), new.splitlines()) if line[:1] in "+-"]
    assert diff == ["-   cloud: aws", "+   cloud: local", "-   infra: gcp/us-central1  # pinned",
                    "+   infra: local  # pinned", "-     - cloud: aws", "+     - cloud: local"]
    # the run script's "echo cloud: aws" is block text, not a key: it stays
    assert rewrite_yaml("run: echo hi\n") == ("run: echo hi\n", [])
    multi = "name: p\n---\nresources:\n  cloud: \"aws\"\n---\nresources: {infra: gcp}\n"
    assert rewrite_yaml(multi)[0] == "name: p\n---\nresources:\n  cloud: local\n---\nresources: {infra: local}\n"


def test_command_rules_change_only_the_command_word_and_the_cloud_flag():
    cases = {
        "sky launch -y -c c1 --infra aws x.yaml": "skyhive launch -y -c c1 --infra local x.yaml",
        "s=$(SKYPILOT_DEBUG=0 sky launch -y -c c1 x.yaml) && echo $s": "s=$(SKYPILOT_DEBUG=0 skyhive launch -y -c c1 x.yaml) && echo $s",
        "sky logs c1 1 | grep sky": "skyhive logs c1 1 | grep sky",
        "echo sky; sky down -y c1": "echo sky; skyhive down -y c1",
        "sky launch --cloud=gcp 'echo ~/sky_workdir/sky'": "skyhive launch --cloud=local 'echo ~/sky_workdir/sky'",
        "ls ~/.sky/sky_logs": "ls ~/.sky/sky_logs",
        "sky exec c1 --infra local x": "skyhive exec c1 --infra local x",
    }
    for old, want in cases.items():
        assert rewrite_command(old)[0] == want, old
    assert rewrite_command("sky launch --infra aws x")[1] == ["sky → skyhive ×1", "--infra/--cloud → local ×1"]
    assert rewrite_command("echo hi") == ("echo hi", [])


def test_the_manifest_says_where_each_skypilot_file_comes_from():
    from bench.audit.programs import GAP, MACHINE, SKYPILOT, SKYPILOT_FILES

    assert {f for prog in SKYPILOT for f in prog.files} == set(SKYPILOT_FILES)
    assert all(len(commit) == 40 for commit in SKYPILOT_FILES.values())
    for prog in SKYPILOT:
        assert prog.kind == "cmds" and prog.commands and all("{name}" not in c for c in prog.commands), prog.id
        assert prog.verdict in ("", GAP, MACHINE) and bool(prog.verdict) == bool(prog.why), prog.id
