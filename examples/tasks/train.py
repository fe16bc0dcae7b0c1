"""A tiny DDP training run standing in for minGPT: a linear model, CPU, gloo.

Started by torchrun on every node (see train.yaml and train-rdzv.yaml). It fits y = x·w + b from
random batches (each rank draws its own), checks that every rank ends with the same parameters (what
DDP guarantees), and prints the loss.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("STEPS", "60"))


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model everywhere
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    true_w, true_b = torch.tensor([[1.0, -2.0, 0.5, 3.0]]), 0.7
    first = None
    for step in range(STEPS):
        x = torch.randn(32, 4, generator=data)
        y = x @ true_w.T + true_b
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        if rank == 0 and step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    assert all(torch.allclose(every[0], p) for p in every), "ranks disagree on the parameters"
    assert loss.item() < first / 10, f"the loss did not go down: {first:.4f} -> {loss.item():.4f}"
    print(f"rank {rank} of {world} (node {os.environ.get('GROUP_RANK', '?')}): training complete, "
          f"loss {first:.4f} -> {loss.item():.4f}", flush=True)
    # free DDP's reducer (and the gloo work it still holds) and wait for every rank before tearing the
    # group down: gloo threads holding Python objects at interpreter exit can abort the process (SIGABRT)
    del model, opt
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Leave without running C++ static destructors: with torch's gloo backend a background thread can
    # still be joinable when the interpreter tears down, and std::terminate aborts an otherwise
    # finished rank ("terminate called without an active exception", exit -6) now and then on a
    # loaded machine — even after destroy_process_group. Everything is flushed first.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
