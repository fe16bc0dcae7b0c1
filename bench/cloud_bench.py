"""Provisioning control-plane overhead: sky.AWS against the raw libcloud calls, both on moto, one run.

    python -m bench.cloud_bench [--nodes 2 16] [--repeat 3]

Runs itself inside a network namespace with only loopback (``unshare --net``; root), since moto's
instances carry invented public addresses. Instances are mapped to no host: both sides stop at
`running`, then tear down. For each node count and side: pool up (prepare → launch → every node
running) and teardown (every node terminated and confirmed → key pair and group deleted) wall time, the
process CPU time, the CPU time of the thread running skyhive's event loop (its libcloud calls, and moto
answering them, run in worker threads; the raw side has no loop), and the number of EC2 API calls. The raw floor is the smallest sequence of libcloud
calls that does the same job: import a key, create a group with its two rules, one create_node per node,
one RunInstances for every node (MinCount = MaxCount = nodes, tagged at creation), one listing until all
run, one destroy_node per node, one listing, delete the group and the key. skyhive also numbers each
instance (CreateTags), reads the image (DescribeImages: its root device), lists what is still tagged
with the pool at cleanup and proves its group gone with one listing. It skips the listings whose answer
it knows (a pool it prepared from nothing: no key pair, group or instance of it can exist before; its
own key pair and group deleted by name and id), and its instance listings are one DescribeInstances
(libcloud's list_nodes adds a DescribeAddresses). skyhive's overhead per node = (skyhive - raw) / nodes, medians over `--repeat` runs; API
calls per node = calls / nodes, and the marginal calls per added node between the smallest and largest
pool (constant per node means this stays fixed as pools grow).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import anyio

REGION = "us-east-1"


def _in_loopback_ns() -> bool:
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def _counting(driver: Any) -> list[int]:
    """Count the driver's API calls (wraps its connection's `request`)."""
    calls = [0]
    request = driver.connection.request

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return request(*args, **kwargs)

    driver.connection.request = counted
    return calls


def raw_round(image: str, nodes: int, tag: str) -> dict[str, float]:
    from libcloud.compute.base import Node

    from skyhive.providers.cloud.ec2_driver import make_driver
    from skyhive.providers.cloud.keys import pool_key

    driver = make_driver(key="testing", secret="testing", region=REGION)
    calls = _counting(driver)
    _, public = pool_key(tag)
    t0, c0 = time.perf_counter(), time.process_time()
    driver.import_key_pair_from_string(f"skyhive-{tag}", public)
    vpc = next(n.id for n in driver.ex_list_networks() if str(n.extra.get("is_default")).lower() == "true")
    group = driver.ex_create_security_group(f"skyhive-{tag}", "bench", vpc_id=vpc)["group_id"]
    driver.ex_authorize_security_group_ingress(group, 22, 22, cidr_ips=["192.0.2.1/32"], protocol="tcp")
    driver.ex_authorize_security_group_ingress(group, 0, 65535, group_pairs=[{"group_id": group}], protocol="-1")
    subnet = driver.ex_list_subnets(filters={"vpc-id": vpc, "availability-zone": REGION + "a"})[0]
    made = driver.run_instances({
        "ImageId": image, "InstanceType": "t3.micro", "MinCount": str(nodes), "MaxCount": str(nodes),
        "KeyName": f"skyhive-{tag}", "NetworkInterface.1.DeviceIndex": "0", "NetworkInterface.1.SubnetId": subnet.id,
        "NetworkInterface.1.SecurityGroupId.1": group, "TagSpecification.1.ResourceType": "instance",
        "TagSpecification.1.Tag.1.Key": "skyhive-pool", "TagSpecification.1.Tag.1.Value": tag})
    ids = [n.id for n in made]
    while not all(n.extra.get("status") == "running" for n in driver.list_nodes(ex_node_ids=ids)):
        time.sleep(0.05)
    t1, c1, calls_up = time.perf_counter(), time.process_time(), calls[0]
    for node_id in ids:
        driver.destroy_node(Node(node_id, "", None, [], [], driver))
    while any(n.extra.get("status") in ("pending", "running") for n in driver.list_nodes(ex_node_ids=ids)):
        time.sleep(0.05)
    driver.ex_delete_security_group_by_id(group)
    driver.delete_key_pair(driver.find_key_pair(f"skyhive-{tag}"))
    t2, c2 = time.perf_counter(), time.process_time()
    return {"up_s": t1 - t0, "down_s": t2 - t1, "cpu_s": (c1 - c0) + (c2 - c1), "loop_cpu_s": 0.0,
            "calls_up": calls_up, "calls_down": calls[0] - calls_up}


async def skyhive_round(image: str, nodes: int, tag: str) -> dict[str, float]:
    from skyhive.providers.base import ClusterSpec
    from skyhive.providers.cloud.aws import AWS
    from skyhive.providers.cloud.base import CloudTimeouts

    aws = AWS(region=REGION, zones=[REGION + "a"], instance_type="t3.micro", image=image, ssh_cidr="192.0.2.1/32",
              timeouts=CloudTimeouts(poll=0.05))
    calls = _counting(aws.driver)
    spec = ClusterSpec(pool_id=tag, nodes=nodes)
    t0, c0, l0 = time.perf_counter(), time.process_time(), time.thread_time()  # this thread runs the loop
    # as the runtime drives it: prepare once, one launch for all nodes, each node waited for on its own
    await aws.prepare(spec)
    handles = await aws.launch(spec, range(nodes))
    running: list[Any] = [None] * nodes

    async def wait(i: int) -> None:
        running[i] = await aws.wait_running(handles[i], lambda _state: None)

    async with anyio.create_task_group() as tg:
        for i in range(nodes):
            tg.start_soon(wait, i)
    t1, c1, calls_up = time.perf_counter(), time.process_time(), calls[0]
    async with anyio.create_task_group() as tg:  # each node terminated on its own, then the pool's things
        for h in running:
            tg.start_soon(aws.terminate, [h])
    await aws.cleanup(tag)
    t2, c2, l2 = time.perf_counter(), time.process_time(), time.thread_time()
    return {"up_s": t1 - t0, "down_s": t2 - t1, "cpu_s": (c1 - c0) + (c2 - c1), "loop_cpu_s": l2 - l0,
            "calls_up": calls_up, "calls_down": calls[0] - calls_up}


def run(node_counts: list[int], repeat: int) -> None:
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "MOTO_EC2_LOAD_DEFAULT_AMIS": "false", "SKYHIVE_HOME": os.environ.get("SKYHIVE_HOME") or
                       f"/tmp/skyhive-cloud-bench-{os.getpid()}"})
    import boto3
    from moto import mock_aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        image = ec2.register_image(Name="bench", RootDeviceName="/dev/sda1", Architecture="x86_64")["ImageId"]
        raw_round(image, 1, "warmup-raw")  # moto's first call is slow (2-5 s): not part of either side
        print(f"{'nodes':>5} {'side':8} {'up ms':>9} {'down ms':>9} {'cpu ms':>9} {'loop cpu':>9} {'calls up':>8} "
              f"{'calls down':>10}")
        calls: dict[str, dict[int, float]] = {"raw": {}, "skyhive": {}}
        for nodes in node_counts:
            results: dict[str, list[dict[str, float]]] = {"raw": [], "skyhive": []}
            for r in range(repeat):  # interleaved, so drift of the machine hits both sides alike
                results["raw"].append(raw_round(image, nodes, f"raw-{nodes}-{r}"))
                results["skyhive"].append(anyio.run(skyhive_round, image, nodes, f"sky-{nodes}-{r}"))
            med = {side: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for side, rs in results.items()}
            for side, m in med.items():
                print(f"{nodes:>5} {side:8} {m['up_s'] * 1e3:9.1f} {m['down_s'] * 1e3:9.1f} {m['cpu_s'] * 1e3:9.1f} "
                      f"{m['loop_cpu_s'] * 1e3:9.1f} {m['calls_up']:8.0f} {m['calls_down']:10.0f}")
            extra = (med["skyhive"]["up_s"] + med["skyhive"]["down_s"] - med["raw"]["up_s"] - med["raw"]["down_s"])
            print(f"{nodes:>5} overhead per node (up + down): {extra / nodes * 1e3:.1f} ms")
            for side, m in med.items():
                total = m["calls_up"] + m["calls_down"]
                print(f"{nodes:>5} {side:8} API calls per node: {total / nodes:.2f}")
                calls[side][nodes] = total
        lo, hi = min(node_counts), max(node_counts)
        if hi > lo:
            for side in ("raw", "skyhive"):
                print(f"marginal API calls per added node ({lo} -> {hi}), {side}: "
                      f"{(calls[side][hi] - calls[side][lo]) / (hi - lo):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not _in_loopback_ns():
        if os.geteuid() != 0:
            print("cloud_bench: needs root to run moto in a loopback-only network namespace", file=sys.stderr)
            return 2
        cmd = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable, "-m",
               "bench.cloud_bench", "--nodes", *map(str, args.nodes), "--repeat", str(args.repeat)]
        return subprocess.call(cmd)
    run(args.nodes, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
