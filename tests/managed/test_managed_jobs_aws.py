"""Managed jobs on AWS against moto (moto_server on 127.0.0.1, in the loopback-only namespace): a spot
instance terminated under the running job (what a spot preemption does) is seen by the job's controller
in the cloud's own listing — the node's worker is still alive, so only the controller's look at the
instances can notice — which stops the attempt, starts a replacement in another zone and resumes from
the checkpoint; afterwards moto holds no instance, group or key pair of any of the job's pools.

The instances are moto's (real EC2 API calls, nothing behind them); their nodes are local worker
processes through the test-only `LocalMappedAWS` (tests/cloud/cloud_fakes.py, FAKE reach). The checkpoint
folder is the task's own `SKYHIVE_CHECKPOINT_DIR` (a folder every mapped node sees, as a shared file
system would be).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import LocalMappedAWS
from tests.infra.moto_ec2 import count_pool, ec2_client, register_image
from tests.managed.test_managed_jobs import ended, logs, queue, skyhive, wait_for

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]

TASK = textwrap.dedent("""\
    name: spotjob
    envs:
      SKYHIVE_CHECKPOINT_DIR: {ckpt}
    run: |
      exec python3 -c '
      import os, time
      d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; p = os.path.join(d, "step")
      step = int(open(p).read()) if os.path.exists(p) else 0
      print("start at step", step, "task", os.environ["SKYPILOT_TASK_ID"], flush=True)
      open(os.path.join(d, "started.%d" % step), "w").write("%d %d" % (os.getppid(), os.getpid()))
      while step < 8:
          time.sleep(0.2); step += 1
          open(p + ".tmp", "w").write(str(step)); os.replace(p + ".tmp", p)
          print("step", step, flush=True)
          while step == 3 and not os.path.exists(os.path.join(d, "release")):
              time.sleep(0.1)  # held until the test has terminated the instance
      '
""")


def instances(endpoint: str, pool_id: str, region: str = "us-east-1") -> list[dict]:
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool_id]}]
    return [i for r in ec2_client(endpoint, region).describe_instances(Filters=tag)["Reservations"]
            for i in r["Instances"]]


def test_a_spot_instance_terminated_under_the_job_is_replaced_in_another_zone(moto_server, skyhive_home, tmp_path,
                                                                               monkeypatch):
    from tests.managed.test_managed_jobs import gone

    server = moto_server
    monkeypatch.setenv("SKYHIVE_JOBS_MACHINE_POLL", "0.2")  # the controller inherits it
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the controller unpickles the test's provider
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (tmp_path / "task.yaml").write_text(TASK.format(ckpt=ckpt))
    provider = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=server.image, spot=True,
                              endpoint=server.endpoint, ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05))
    job = sky.jobs.launch(tmp_path / "task.yaml", provider=provider)
    wait_for(lambda: (ckpt / "step").exists() and (ckpt / "step").read_text() == "3", what="step 3")
    first_pool = f"spotjob-job{job}-1"
    (first,) = [i for i in instances(server.endpoint, first_pool) if i["State"]["Name"] == "running"]
    assert first["InstanceLifecycle"] == "spot"
    worker, program = map(int, (ckpt / "started.0").read_text().split())
    (ckpt / "release").write_text("go on")
    # the preemption: the instance goes away in the cloud; the (mapped) worker itself is untouched
    ec2_client(server.endpoint).terminate_instances(InstanceIds=[first["InstanceId"]])
    info = ended(job)
    assert info["state"] == "SUCCEEDED", (info, logs(job))
    assert (info["attempts"], info["recoveries"], info["restarts_on_errors"]) == (2, 1, 0), info
    text = logs(job)
    assert f"instance {first['InstanceId']} is " in text and "(the provider took the machine)" in text, text
    starts = [line for line in text.splitlines() if line.startswith("start at step")]
    assert len(starts) == 2 and starts[0].startswith("start at step 0 ")
    assert int(starts[1].split()[3]) >= 3, starts  # from the checkpoint (the mapped worker ran on a moment)
    assert text.count("step 8") == 1
    assert starts[0].split(" task ")[1] == starts[1].split(" task ")[1]
    assert (ckpt / "step").read_text() == "8"
    # the replacement went to another zone than the one that just preempted the job
    (second,) = instances(server.endpoint, f"spotjob-job{job}-2")
    zone = first["Placement"]["AvailabilityZone"]
    assert second["Placement"]["AvailabilityZone"] != zone
    # nothing left: the first attempt's worker and program stopped, no instance, group or key in moto
    assert gone(worker) and gone(program)
    for pool in info["pools"]:
        assert count_pool(pool, server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}, pool
    assert info["leaked"] == []
    assert isinstance(info["cost_usd"], float) and info["cost_usd"] > 0  # t3.micro's price, both attempts
    assert "$" in skyhive("jobs", "queue").stdout


NOTICE_TASK = textwrap.dedent("""\
    name: noticejob
    envs:
      SKYHIVE_CHECKPOINT_DIR: {ckpt}
    run: |
      exec python3 -c '
      import os, sys, time
      d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; p = os.path.join(d, "step")
      notice = os.environ["SKYHIVE_INTERRUPTION_NOTICE"]
      step = int(open(p).read()) if os.path.exists(p) else 0
      print("start at step", step, flush=True)
      told = False
      while step < 6:
          time.sleep(0.2); step += 1
          open(p + ".tmp", "w").write(str(step)); os.replace(p + ".tmp", p)
          print("step", step, flush=True)
          while step == 3 and not os.path.exists(notice):
              time.sleep(0.1)  # the first attempt waits for its notice here
          if os.path.exists(notice) and not told:
              told = True
              print("checkpointed at step", step, "on", open(notice).read(), flush=True)
              while not os.path.exists(os.path.join(d, "release")):
                  time.sleep(0.1)  # its grace, held by the test: the next attempt is provisioned meanwhile
              if not os.path.exists(os.path.join(d, "finish")):
                  sys.exit(1)  # a program that stops on the notice: a recovery, not one of its own failures
      print("finished at step", step, flush=True)
      '
""")


def test_a_spot_interruption_notice_starts_the_recovery_before_the_instance_goes(moto_server, skyhive_home,
                                                                                  tmp_path, monkeypatch):
    from tests.infra.fake_imds import FakeInstanceMetadata

    server = moto_server
    imds = FakeInstanceMetadata()
    try:
        import urllib.error
        import urllib.request

        from skyhive.runtime.onnode.interruption import fetch_ec2_notice

        # the fake refuses what IMDSv2 refuses: no token (401), a token PUT without its TTL header (400)
        for req, code in ((urllib.request.Request(imds.endpoint + "/latest/meta-data/spot/instance-action"), 401),
                          (urllib.request.Request(imds.endpoint + "/latest/api/token", method="PUT"), 400)):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=10)
            assert err.value.code == code
        assert fetch_ec2_notice(imds.endpoint) is None  # with a token: nothing scheduled yet (404)
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint)  # the nodes' watcher asks it
        monkeypatch.setenv("SKYHIVE_INTERRUPTION_INTERVAL", "0.1")
        monkeypatch.setenv("SKYHIVE_JOBS_NOTICE_GRACE", "600")  # the program's own exit ends the attempt
        monkeypatch.setenv("PYTHONPATH", str(ROOT))
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        (tmp_path / "task.yaml").write_text(NOTICE_TASK.format(ckpt=ckpt))
        provider = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=server.image, spot=True,
                                  endpoint=server.endpoint, ssh_cidr="192.0.2.1/32",
                                  timeouts=CloudTimeouts(poll=0.05))
        job = sky.jobs.launch(tmp_path / "task.yaml", provider=provider)
        wait_for(lambda: (ckpt / "step").exists() and (ckpt / "step").read_text() == "3", what="step 3")
        wait_for(lambda: imds.asked > 1, what="the node's watcher to ask the metadata service")
        (first,) = instances(server.endpoint, f"noticejob-job{job}-1")
        notice = imds.notify("terminate")
        # the next attempt is provisioned at the notice, while the program still has its grace
        wait_for(lambda: [i for i in instances(server.endpoint, f"noticejob-job{job}-2")
                          if i["State"]["Name"] == "running"], what="attempt 2's instance")
        wait_for(lambda: queue()[job]["state"] == "RUNNING" and queue()[job]["attempts"] == 2, what="attempt 2 up")
        assert [i["State"]["Name"] for i in instances(server.endpoint, f"noticejob-job{job}-1")] == ["running"]
        assert (ckpt / "step").read_text() == "3"  # the first attempt's program is still in its grace
        (ckpt / "release").write_text("go on")
        info = ended(job)
        assert info["state"] == "SUCCEEDED", (info, logs(job))
        assert (info["attempts"], info["recoveries"], info["restarts_on_errors"]) == (2, 1, 0), info
        text = logs(job)
        assert f'checkpointed at step 3 on {{"action": "terminate", "time": "{notice["time"]}"}}' in text, text
        said = f"[skyhive] node 0: interruption notice: terminate at {notice['time']}: the attempt ends in 600 s"
        assert said in text and text.index(said) < text.index("recovery: starting attempt 2"), text
        starts = [line for line in text.splitlines() if line.startswith("start at step")]
        assert starts == ["start at step 0", "start at step 3"], text
        from skyhive.runtime.control.managed import store

        assert [e["notice"] for e in store.events(job) if e["kind"] == "notice"] == [notice], [(e["kind"], e.get("notice")) for e in store.events(job)]
        # the recovery came from the notice: moto never terminated the instance by itself (the test did not
        # either); the teardown of the attempt did, and the replacement is in another zone
        (second,) = instances(server.endpoint, f"noticejob-job{job}-2")
        assert second["Placement"]["AvailabilityZone"] != first["Placement"]["AvailabilityZone"]
        for pool in info["pools"]:
            assert count_pool(pool, server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}, pool
        assert info["leaked"] == []
        from skyhive.runtime.control.managed import store

        kinds = [(e["kind"], e.get("attempt")) for e in store.events(job)]
        assert kinds.index(("running", 2)) < kinds.index(("stopped", 1)), kinds

        # a program that finishes the job in its grace (exit 0 after the notice): the attempt provisioned
        # at the notice runs nothing and is not counted; its pool is gone too
        ckpt2 = tmp_path / "ckpt2"
        ckpt2.mkdir()
        (tmp_path / "task2.yaml").write_text(NOTICE_TASK.format(ckpt=ckpt2))
        (ckpt2 / "finish").write_text("finish in the grace")
        job2 = sky.jobs.launch(tmp_path / "task2.yaml", provider=provider)
        wait_for(lambda: (ckpt2 / "step").exists() and (ckpt2 / "step").read_text() == "3", what="job 2 at step 3")
        wait_for(lambda: imds.asked > 1, what="job 2's watcher")
        imds.notify("terminate")
        wait_for(lambda: queue()[job2]["attempts"] == 2, what="job 2's next attempt provisioned")
        (ckpt2 / "release").write_text("go on")
        info2 = ended(job2)
        text2 = logs(job2)
        assert info2["state"] == "SUCCEEDED", (info2, text2)
        assert (info2["attempts"], info2["recoveries"]) == (1, 0), (info2, text2)
        assert "finished at step 6" in text2 and text2.count("start at step") == 1, text2
        assert "attempt 2 was not needed" in text2, text2
        assert len(info2["pools"]) == 2 and info2["leaked"] == []
        for pool in info2["pools"]:
            assert count_pool(pool, server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}, pool
    finally:
        imds.close()


def test_a_job_preempted_in_one_region_recovers_in_the_next_never_straight_back(moto_server, skyhive_home, tmp_path,
                                                                                 monkeypatch):
    """provider=[us-east-1, us-west-2]: the first attempt runs in us-east-1 (first in the list); its
    instance is taken → the recovery goes to us-west-2, not back to the region that just preempted it,
    although us-east-1 comes first and has capacity."""
    from tests.managed.test_managed_jobs import gone

    server = moto_server
    monkeypatch.setenv("SKYHIVE_JOBS_MACHINE_POLL", "0.2")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (tmp_path / "task.yaml").write_text(TASK.format(ckpt=ckpt).replace("name: spotjob", "name: regionjob"))
    common = dict(instance_type="t3.micro", spot=True, endpoint=server.endpoint, ssh_cidr="192.0.2.1/32",
                  timeouts=CloudTimeouts(poll=0.05))
    east = LocalMappedAWS(region="us-east-1", image=server.image, **common)
    west = LocalMappedAWS(region="us-west-2", image=register_image(server.endpoint, "us-west-2"), **common)
    job = sky.jobs.launch(tmp_path / "task.yaml", provider=[east, west])
    wait_for(lambda: (ckpt / "step").exists() and (ckpt / "step").read_text() == "3", what="step 3")
    (first,) = [i for i in instances(server.endpoint, f"regionjob-job{job}-1") if i["State"]["Name"] == "running"]
    assert instances(server.endpoint, f"regionjob-job{job}-1", "us-west-2") == []
    worker, program = map(int, (ckpt / "started.0").read_text().split())
    (ckpt / "release").write_text("go on")
    ec2_client(server.endpoint).terminate_instances(InstanceIds=[first["InstanceId"]])  # the preemption
    info = ended(job)
    assert info["state"] == "SUCCEEDED", (info, logs(job))
    assert (info["attempts"], info["recoveries"]) == (2, 1), info
    text = logs(job)
    assert f"instance {first['InstanceId']} is " in text and (ckpt / "step").read_text() == "8"
    # the replacement is in the other region; nothing of it in the one that preempted the job
    (second,) = instances(server.endpoint, f"regionjob-job{job}-2", "us-west-2")
    assert second["Placement"]["AvailabilityZone"].startswith("us-west-2")
    assert instances(server.endpoint, f"regionjob-job{job}-2") == []
    # nothing left in either region
    assert gone(worker) and gone(program)
    for pool in info["pools"]:
        for region in ("us-east-1", "us-west-2"):
            assert count_pool(pool, server.endpoint, region) == {"instances": 0, "groups": 0, "keys": 0}, (pool, region)
    assert info["leaked"] == []


GANG_TASK = textwrap.dedent("""\
    name: gangspot
    num_nodes: 2
    envs:
      SKYHIVE_CHECKPOINT_DIR: {ckpt}
    run: |
      exec python3 -c '
      import os, time
      d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; rank = os.environ["SKYPILOT_NODE_RANK"]
      p = os.path.join(d, "step." + rank)
      step = int(open(p).read()) if os.path.exists(p) else 0
      print("start at step", step, flush=True)
      open(os.path.join(d, "started.%s.%d" % (rank, step)), "w").write("%d %d" % (os.getppid(), os.getpid()))
      while step < 6:
          time.sleep(0.2); step += 1
          open(p + ".tmp", "w").write(str(step)); os.replace(p + ".tmp", p)
          while step == 3 and not os.path.exists(os.path.join(d, "release")):
              time.sleep(0.1)  # held until the test has taken node 1's instance
      '
""")


def test_a_preempted_node_of_a_two_node_spot_job_is_replaced_alone_in_another_zone(moto_server, skyhive_home,
                                                                                    tmp_path, monkeypatch):
    """SkyPilot's users' complaint, "one preempted node re-provisions the whole cluster": here node 1's
    instance is taken, node 0's stays — one new instance (in another zone than the one that took node 1),
    the same pool and attempt, node 0's worker kept, both ranks' programs restarted from their checkpoints."""
    from tests.managed.test_managed_jobs import gone

    server = moto_server
    monkeypatch.setenv("SKYHIVE_JOBS_MACHINE_POLL", "0.2")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (tmp_path / "task.yaml").write_text(GANG_TASK.format(ckpt=ckpt))
    provider = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=server.image, spot=True,
                              endpoint=server.endpoint, ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05))
    job = sky.jobs.launch(tmp_path / "task.yaml", provider=provider)
    wait_for(lambda: all((ckpt / f"step.{r}").exists() and (ckpt / f"step.{r}").read_text() == "3" for r in "01"),
             what="step 3 on both nodes")
    pool = f"gangspot-job{job}-1"
    by_node = {int(t["Value"]): i for i in instances(server.endpoint, pool) for t in i.get("Tags", ())
               if t["Key"] == "skyhive-node"}
    assert sorted(by_node) == [0, 1]
    kept_worker, _ = map(int, (ckpt / "started.0.0").read_text().split())
    lost_worker, lost_program = map(int, (ckpt / "started.1.0").read_text().split())
    # the preemption, while both programs are held at step 3 (no release: the restarted ones resume at 3
    # and run on; nothing finishes before the controller has seen the instance go)
    ec2_client(server.endpoint).terminate_instances(InstanceIds=[by_node[1]["InstanceId"]])
    info = ended(job)
    text = logs(job)
    assert info["state"] == "SUCCEEDED", (info, text)
    assert (info["attempts"], info["recoveries"], info["pools"]) == (1, 1, [pool]), (info, text)
    assert f"instance {by_node[1]['InstanceId']} is " in text and "replacing only it" in text, text
    # one more instance in the pool, for node 1, in another zone; node 0's instance was never replaced
    now = instances(server.endpoint, pool)
    assert len(now) == 3, [(i["InstanceId"], i["State"]["Name"]) for i in now]
    (new,) = [i for i in now if i["InstanceId"] not in {j["InstanceId"] for j in by_node.values()}]
    assert {t["Key"]: t["Value"] for t in new["Tags"]}["skyhive-node"] == "1"
    assert new["Placement"]["AvailabilityZone"] != by_node[1]["Placement"]["AvailabilityZone"]
    # node 0 restarted its program in the same worker, from its checkpoint; node 1 in a new one
    restarted0 = [p for p in ckpt.glob("started.0.*") if p.name != "started.0.0"]
    restarted1 = [p for p in ckpt.glob("started.1.*") if p.name != "started.1.0"]
    assert len(restarted0) == 1 and len(restarted1) == 1, sorted(p.name for p in ckpt.iterdir())
    assert int(restarted0[0].read_text().split()[0]) == kept_worker
    assert int(restarted1[0].read_text().split()[0]) != lost_worker
    assert int(restarted0[0].name.rsplit(".", 1)[1]) >= 3 and int(restarted1[0].name.rsplit(".", 1)[1]) >= 3
    assert (ckpt / "step.0").read_text() == "6" and (ckpt / "step.1").read_text() == "6"
    assert gone(lost_worker) and gone(lost_program) and gone(kept_worker)
    assert count_pool(pool, server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}
    assert info["leaked"] == []
