"""Spot interruption notices on GCE and Azure nodes: the node's watcher (real `Watcher` threads, through
the worker's own `run_script`) against FAKES of each cloud's metadata service on 127.0.0.1
(`tests/infra/fake_gce_metadata.py`, `tests/infra/fake_azure_imds.py`; nothing real runs here): nothing
while none is scheduled, then the notice file, the `MARK` line and the `AFTER_NOTICE` exit code; the
fakes refuse what the real services refuse (a watcher that forgot a header would be refused); a service
that is not there is no notice and no crash; the GCP and Azure providers ask their nodes to watch.
(EC2's notice: tests/managed/test_managed_jobs_aws.py.)
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from skyhive.protocol.info import InstanceInfo
from skyhive.runtime.onnode import instance, interruption
from skyhive.runtime.onnode.nodecmd import run_script
from skyhive.runtime.onnode.notices import azure as azure_notice
from skyhive.runtime.onnode.notices import gce as gce_notice
from skyhive.runtime.onnode.notices import source_for
from tests.infra.fake_azure_imds import FakeAzureScheduledEvents
from tests.infra.fake_gce_metadata import FakeGCEMetadata

#: a `run` script that waits for its node's notice, keeps it, then stops (as a program that checkpoints
#: and exits on the notice does)
SCRIPT = ('while [ ! -e "$SKYHIVE_INTERRUPTION_NOTICE" ]; do sleep 0.05; done\n'
          'cp "$SKYHIVE_INTERRUPTION_NOTICE" "$KEEP"\nexit 3\n')


def _status(req: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - the fake on 127.0.0.1
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _until(cond, what: str, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def _on_a_node(monkeypatch):
    """The worker's context for `run_script` (a one-node pool's node 0, as on a cloud node)."""
    info = InstanceInfo(node=0, total_nodes=1, head_addr="127.0.0.1", head_port=1, pool_id="notices-test")
    monkeypatch.setattr(instance, "_current", info)


def _run_until_notice(tmp_path: Path, cloud: str, asked, notify) -> tuple[int, dict, list]:
    """`SCRIPT` run by the worker's `run_script` on a node watching `cloud`; `notify()` once the watcher
    has looked a few times (`asked()`) and seen nothing. Returns the exit code, the notice the program
    found, and what `notify` returned."""
    work = tmp_path / cloud / "sky_workdir"
    work.mkdir(parents=True)
    keep = tmp_path / cloud / "kept.json"
    env = {interruption.WATCH_ENV: cloud, interruption.INTERVAL_ENV: "0.1", "KEEP": str(keep)}
    result: dict = {}

    def run() -> None:
        try:
            result["code"] = run_script(str(work), SCRIPT, "task-1", "run", task_env=env)
        except BaseException as exc:  # shown by the test
            result["error"] = exc

    runner = threading.Thread(target=run)
    looked = asked()
    runner.start()
    try:  # (on GCE: a plain look, then a hanging one that ended unchanged, then the next)
        _until(lambda: asked() >= looked + 3 or not runner.is_alive(), f"{cloud}'s watcher to look 3 times")
        assert "error" not in result and runner.is_alive(), result
        notice_file = tmp_path / cloud / "interruption-notice.json"
        assert not notice_file.exists() and not keep.exists()  # nothing while none is scheduled
        returned = [notify()]
    finally:
        runner.join(60)
    assert not runner.is_alive()
    return result["code"], json.loads(keep.read_text()), returned


def test_a_gce_spot_vm_preemption_is_reported_by_its_node(tmp_path, monkeypatch, capsys):
    fake = FakeGCEMetadata()
    try:
        url = fake.endpoint + "/computeMetadata/v1/instance/preempted"
        # the fake refuses what the metadata server refuses: no Metadata-Flavor (a watcher that forgot it),
        # the retired header alone, a proxied request, another method
        assert _status(urllib.request.Request(url)) == 403
        assert _status(urllib.request.Request(url, headers={"X-Google-Metadata-Request": "True"})) == 403
        assert _status(urllib.request.Request(url, headers={"Metadata-Flavor": "Google",
                                                            "X-Forwarded-For": "203.0.113.9"})) == 403
        assert _status(urllib.request.Request(url, method="POST", headers={"Metadata-Flavor": "Google"})) == 405
        assert fake.refused == [403, 403, 403, 405]
        # the default address is the Google libraries' own; GCE_METADATA_HOST (then GCE_METADATA_ROOT) moves it
        monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
        monkeypatch.delenv("GCE_METADATA_ROOT", raising=False)
        assert gce_notice.endpoint() == "http://metadata.google.internal"
        monkeypatch.setenv("GCE_METADATA_ROOT", fake.host)
        assert gce_notice.endpoint() == fake.endpoint
        assert gce_notice.GCENotice().notice() is None  # FALSE: not preempted

        before = time.time()
        code, notice, _ = _run_until_notice(tmp_path, "gcp", lambda: fake.asked, fake.preempt)
        assert code == interruption.AFTER_NOTICE + 3  # it failed after its node's notice: not its own fault
        assert notice["action"] == "terminate" and notice["cloud"] == "gcp", notice
        when = time.mktime(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert when >= int(before) + gce_notice.NOTICE_SECONDS  # the 30 s GCE promises, from when it was seen
        err = capsys.readouterr().err
        assert interruption.MARK + json.dumps(notice, sort_keys=True) in err.splitlines(), err
        assert fake.refused == [403, 403, 403, 405]  # the watcher itself was never refused
    finally:
        fake.close()


def test_an_azure_spot_vm_eviction_is_reported_by_its_node_and_never_acknowledged(tmp_path, monkeypatch, capsys):
    fake = FakeAzureScheduledEvents()
    try:
        base = fake.endpoint + "/metadata/scheduledevents"
        ok = {"Metadata": "true"}
        # the fake refuses what IMDS refuses: no Metadata header (a watcher that forgot it), no or an
        # unsupported api-version, a proxied request
        assert _status(urllib.request.Request(base + "?api-version=2020-07-01")) == 400
        assert _status(urllib.request.Request(base, headers=ok)) == 400
        assert _status(urllib.request.Request(base + "?api-version=2099-01-01", headers=ok)) == 400
        assert _status(urllib.request.Request(base + "?api-version=2020-07-01",
                                              headers={**ok, "X-Forwarded-For": "203.0.113.9"})) == 400
        assert fake.refused == [400, 400, 400, 400]
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(base, headers=ok), timeout=30)
        assert "newest-versions" in json.loads(err.value.read())
        # nothing scheduled: an empty Events list
        with urllib.request.urlopen(urllib.request.Request(base + "?api-version=2020-07-01", headers=ok),
                                    timeout=30) as resp:
            assert json.loads(resp.read())["Events"] == []
        monkeypatch.delenv("SKYHIVE_AZURE_IMDS_ENDPOINT", raising=False)
        assert azure_notice.endpoint() == "http://169.254.169.254"
        monkeypatch.setenv("SKYHIVE_AZURE_IMDS_ENDPOINT", fake.endpoint)
        assert azure_notice.AzureNotice().notice() is None

        code, notice, (event,) = _run_until_notice(tmp_path, "azure", lambda: fake.asked, fake.evict)
        assert code == interruption.AFTER_NOTICE + 3
        not_before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.strptime(event["NotBefore"], "%a, %d %b %Y %H:%M:%S GMT"))
        assert notice == {"action": "terminate", "time": not_before, "cloud": "azure", "event_id": event["EventId"],
                          "event_type": "Preempt"}, notice
        err_text = capsys.readouterr().err
        assert interruption.MARK + json.dumps(notice, sort_keys=True) in err_text.splitlines(), err_text
        assert fake.acknowledged == []  # acknowledging would hasten the eviction
        assert fake.refused == [400, 400, 400, 400, 400]  # (the test's own five; none from the watcher)
    finally:
        fake.close()


class _Counting:
    """A notice source that counts its looks and their failures (to know the watcher kept looking)."""

    def __init__(self, inner) -> None:
        self.inner, self.interval, self.hangs = inner, inner.interval, inner.hangs
        self.looks = self.failed = 0

    def notice(self):
        self.looks += 1
        try:
            return self.inner.notice()
        except OSError:
            self.failed += 1
            raise


@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_a_metadata_service_that_is_not_there_is_no_notice_and_no_crash(cloud, tmp_path, monkeypatch):
    with socket.socket() as sock:  # a port nothing listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name in ("GCE_METADATA_HOST", "SKYHIVE_AZURE_IMDS_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
        monkeypatch.setenv(name, f"127.0.0.1:{port}" if name == "GCE_METADATA_HOST" else f"http://127.0.0.1:{port}")
    source = _Counting(source_for(cloud, wait=1))
    with pytest.raises(OSError):
        source.inner.notice()
    path = tmp_path / "notice.json"
    watcher = interruption.Watcher(str(path), 0.05, source=source).start()
    _until(lambda: source.failed >= 3, "3 refused looks")
    watcher.stop()
    assert watcher.seen is None and not path.exists()


def test_gcp_and_azure_nodes_watch_their_clouds_notice(tmp_path):
    from skyhive.providers.cloud.aws import AWS
    from skyhive.providers.cloud.azure import Azure
    from skyhive.providers.cloud.gcp import GCP

    assert (AWS.interruption_notices, GCP.interruption_notices, Azure.interruption_notices) == ("aws", "gcp", "azure")
    # each is a watch the node knows; an unknown one starts nothing
    for cloud in ("aws", "gcp", "azure"):
        env = {interruption.WATCH_ENV: cloud, interruption.INTERVAL_ENV: "30"}
        (tmp_path / cloud / "w").mkdir(parents=True)
        watcher = interruption.start_for(env, str(tmp_path / cloud / "w"))
        assert watcher is not None
        assert env[interruption.NOTICE_ENV] == str(tmp_path / cloud / "interruption-notice.json")
        watcher.stop()
    assert interruption.start_for({interruption.WATCH_ENV: "digitalocean"}, str(tmp_path)) is None
    with pytest.raises(ValueError, match="unknown cloud 'digitalocean'"):
        source_for("digitalocean")


def test_a_managed_job_on_a_noticed_node_finishes_in_its_grace_and_the_next_attempt_is_not_needed(
        tmp_path, monkeypatch, skyhive_home):
    """End to end through the job's controller, on Local nodes watching GCE's and then Azure's notice
    (the GCP and Azure providers' own managed jobs need their APIs reachable from the detached
    controller, which the in-process fakes of those APIs are not): the notice reaches the controller,
    which logs and records it and provisions the next attempt at once; the program, told by the notice
    file, finishes in its grace, so that attempt runs nothing."""
    import skyhive as sky
    from skyhive.runtime.control.managed import store
    from tests.managed.noticed import AzureNoticedLocal, GCENoticedLocal
    from tests.managed.test_managed_jobs import ended, logs, queue, wait_for
    from tests.managed.test_managed_jobs_aws import NOTICE_TASK, ROOT

    monkeypatch.setenv("SKYHIVE_INTERRUPTION_INTERVAL", "0.1")
    monkeypatch.setenv("SKYHIVE_JOBS_NOTICE_GRACE", "600")  # the program's own exit ends the attempt
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the controller unpickles the test's provider
    gce, imds = FakeGCEMetadata(), FakeAzureScheduledEvents()
    try:
        monkeypatch.setenv("GCE_METADATA_HOST", gce.host)  # the nodes' watchers ask the fakes
        monkeypatch.setenv("SKYHIVE_AZURE_IMDS_ENDPOINT", imds.endpoint)
        for cloud, provider, asked, notify in (("gcp", GCENoticedLocal(), lambda: gce.asked, gce.preempt),
                                               ("azure", AzureNoticedLocal(), lambda: imds.asked, imds.evict)):
            ckpt = tmp_path / cloud
            ckpt.mkdir()
            (ckpt / "finish").write_text("finish in the grace")
            (tmp_path / f"{cloud}.yaml").write_text(NOTICE_TASK.format(ckpt=ckpt))
            job = sky.jobs.launch(tmp_path / f"{cloud}.yaml", provider=provider)
            wait_for(lambda: (ckpt / "step").exists() and (ckpt / "step").read_text() == "3", what=f"{cloud} step 3")
            looked = asked()
            wait_for(lambda: asked() > looked, what=f"the {cloud} node's watcher")
            notify()
            wait_for(lambda: queue()[job]["attempts"] == 2, what=f"{cloud}: the next attempt provisioned")
            (ckpt / "release").write_text("go on")
            info = ended(job)
            text = logs(job)
            assert info["state"] == "SUCCEEDED", (info, text)
            assert (info["attempts"], info["recoveries"]) == (1, 0), (info, text)
            (notice,) = [e["notice"] for e in store.events(job) if e["kind"] == "notice"]
            assert notice["action"] == "terminate" and notice["cloud"] == cloud, notice
            (told,) = [line.split(" on ", 1)[1] for line in text.splitlines() if line.startswith("checkpointed at step 3")]
            assert json.loads(told) == notice, text  # the program read the same notice from its file
            said = f"[skyhive] node 0: interruption notice: terminate at {notice['time']}: the attempt ends in 600 s"
            assert said in text and "attempt 2 was not needed" in text, text
            assert "finished at step 6" in text and text.count("start at step") == 1, text
            assert info["leaked"] == []
        assert imds.acknowledged == [] and gce.refused == [] and imds.refused == []
    finally:
        gce.close()
        imds.close()
