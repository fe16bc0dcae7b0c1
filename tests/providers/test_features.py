"""Capabilities declared one way (issue 37): each provider says what it can do in one `features`
declaration (`providers/features.py`), with a reason for what it cannot do; `skyhive check`, `--hosts`,
the plan's "machines:" line and the interruption notices read that declaration, not a provider's name."""

from __future__ import annotations

import ast
import io
import sys
import types
from pathlib import Path

import pytest

from skyhive.providers import registry
from skyhive.providers.base import NodeHandle, Provider, ProvisionError
from skyhive.providers.features import Feature, Features
from skyhive.providers.local import Local

ROOT = Path(__file__).resolve().parents[2]
#: the names the declaration replaced: a provider of this project sets none of them any more
OLD_NAMES = {"unsupported", "can_stop", "opens_ports", "fixed_machines", "bulk_teardown", "node_homes",
             "same_machine", "interruption_notices"}


def test_every_provider_declares_its_capabilities_in_features_only():
    found = []
    for path in sorted((ROOT / "providers").rglob("*.py")):
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] \
                    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else []
                found += [f"{path.relative_to(ROOT)}:{stmt.lineno} {cls.name}.{t.id}" for t in targets
                          if isinstance(t, ast.Name) and t.id in OLD_NAMES]
    # (Provider itself derives the old names from `features`: `unsupported = LEGACY["unsupported"]`, ...)
    assert [f for f in found if not f.split()[1].startswith("Provider.")] == [], found
    for name in registry.names():
        cls = registry.provider_class(name)
        assert isinstance(cls.features, Features), name
        for feature in Feature:  # every feature it lacks has a reason to give
            assert (feature in cls.features) == (cls.features.why_not(feature, name) is None), (name, feature)


class _Tiny(Provider):
    name = "tinyfeat"

    async def launch(self, spec, nodes):  # pragma: no cover - never launched here
        return []

    async def terminate(self, handles):  # pragma: no cover
        return None


def test_a_declaration_gives_reasons_and_the_old_names_read_through():
    class Clouded(_Tiny):
        features = Features(Feature.CREATES_MACHINES, Feature.STOP, notices="gcp",
                            cannot={Feature.KEEP: "kept pools are not built for this cloud"})

    assert Feature.STOP in Clouded.features and Feature.KEEP not in Clouded.features
    assert Clouded.features.why_not(Feature.KEEP, "clouded") == "kept pools are not built for this cloud"
    assert Clouded.features.why_not(Feature.OPEN_PORTS, "clouded") == "provider 'clouded' cannot open ports on its firewall"
    # the old names, derived (public API: a plugin or a user's code may still read them)
    assert (Clouded.can_stop, Clouded.fixed_machines, Clouded.opens_ports, Clouded.interruption_notices) == \
        (True, False, False, "gcp")
    assert Clouded.unsupported == {"keep": "kept pools are not built for this cloud"}
    assert _Tiny.features == Features(Feature.KEEP) and _Tiny.fixed_machines and not _Tiny.same_machine
    with pytest.raises(ValueError, match="stop both offered and not"):
        Features(Feature.STOP, cannot={Feature.STOP: "no"})
    with pytest.raises(TypeError, match="is not a Feature"):
        Features("stop")  # type: ignore[arg-type]


def test_a_subclass_setting_an_old_name_has_it_folded_into_its_features():
    class OldStyle(Local):  # a third party's provider written against the old names
        same_machine = False
        can_stop = True
        unsupported = {"keep": "not here"}
        interruption_notices = "azure"

    f = OldStyle.features
    assert Feature.SAME_MACHINE not in f and Feature.STOP in f and Feature.NODE_HOMES in f
    assert f.why_not(Feature.KEEP, "x") == "not here" and f.notices == "azure"

    class NewOnTop(OldStyle):  # a declaration below wins over an old name above it
        features = Features(Feature.KEEP)

    assert NewOnTop.features == Features(Feature.KEEP) and not NewOnTop.can_stop


@pytest.mark.anyio
async def test_a_provider_that_cannot_stop_refuses_with_its_declared_reason():
    class NoStop(_Tiny):
        features = Features(cannot={Feature.STOP: "its machines are leased by the hour"})

    with pytest.raises(NotImplementedError, match="its machines are leased by the hour"):
        await NoStop().stop_nodes(["i-1"])
    with pytest.raises(NotImplementedError, match="provider 'tinyfeat' cannot stop machines and start them again"):
        await _Tiny().node_states(["i-1"])


# ---- what reads the declaration ------------------------------------------------------------------------


@pytest.fixture
def new_providers(monkeypatch):
    """Two providers of a package this project has never seen, registered the way a built-in one is."""
    module = types.ModuleType("tinyfeat_providers")

    class TinyCloud(_Tiny):
        name = "tinycloud"
        features = Features(Feature.CREATES_MACHINES, Feature.CHECK, notices="aws")

        @classmethod
        def check(cls):
            return [("credentials", "found: TINY_TOKEN")]

    class TinyHosts(_Tiny):
        name = "tinyhosts"
        features = Features(Feature.KEEP, Feature.HOSTS)

        def __init__(self, hosts, **options):
            self.hosts, self.options = hosts, options

    module.TinyCloud, module.TinyHosts = TinyCloud, TinyHosts
    monkeypatch.setitem(sys.modules, "tinyfeat_providers", module)
    monkeypatch.setitem(registry.PROVIDERS, "tinycloud", ("tinyfeat_providers", "TinyCloud"))
    monkeypatch.setitem(registry.PROVIDERS, "tinyhosts", ("tinyfeat_providers", "TinyHosts"))
    monkeypatch.setattr(registry, "_exists", lambda module: module == "tinyfeat_providers" or
                        module.startswith("skyhive."))
    return TinyCloud, TinyHosts


def test_skyhive_check_reports_every_provider_declaring_check_and_no_other(new_providers, monkeypatch):
    from skyhive.runtime.commands import check

    for var in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "DIGITALOCEAN_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    names = check.clouds()
    assert names[:4] == ("aws", "gcp", "azure", "digitalocean") and "tinycloud" in names
    assert not {"local", "ssh", "slurm", "simulated", "fallback", "tinyhosts"} & set(names)
    out = io.StringIO()
    assert check.report(out, ("tinycloud",)) == 0
    assert out.getvalue().startswith("tinycloud:\n  credentials: found: TINY_TOKEN\n")


def test_hosts_go_to_the_provider_that_declares_it_runs_on_them(new_providers):
    _, TinyHosts = new_providers
    made = registry.from_cli("tinyhosts", hosts=["h1", "h2"], options={"user": "u"})
    assert isinstance(made, TinyHosts) and made.hosts == ["h1", "h2"] and made.options == {"user": "u"}
    with pytest.raises(ProvisionError, match="the tinyhosts provider needs hosts"):
        registry.from_cli("tinyhosts")
    with pytest.raises(ProvisionError, match="--hosts is for the ssh and tinyhosts provider; provider 'tinycloud' "
                                             "does not take hosts"):
        registry.from_cli("tinycloud", hosts=["h1"])
    with pytest.raises(ProvisionError, match="the ssh provider needs hosts"):
        registry.from_cli("ssh")


def test_the_plan_says_where_machines_are_from_the_declaration(new_providers, tmp_path):
    from skyhive.runtime.commands.plan import _describe
    from skyhive.runtime.commands.taskfile import loads

    _, TinyHosts = new_providers
    task = loads("run: echo hi\n", cwd=str(tmp_path))
    assert "  machines: this machine (nothing is created; no cloud cost)" in _describe(task, Local(), {})
    assert "  machines: existing machines (nothing is created; no cloud cost)" in _describe(task, TinyHosts([]), {})


def test_the_notice_a_provider_declares_is_one_the_nodes_can_watch():
    from skyhive.runtime.onnode import notices

    declared = {registry.provider_class(n).features.notices for n in registry.names()} - {""}
    assert declared == {"aws", "gcp", "azure"} and declared <= set(notices.CLOUDS)
    assert type(notices.source_for("gcp", wait=1)).__name__ == "GCENotice"
    # the package finds its sources by what each module declares, not by a list of clouds
    text = (ROOT / "runtime/onnode/notices/__init__.py").read_text()
    assert '"aws"' not in text and '"gcp"' not in text and '"azure"' not in text
