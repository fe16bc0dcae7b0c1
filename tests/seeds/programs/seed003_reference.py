# Seed 003 (the torch plugin reference), "Basic DDP Training" and the pool variants after it, as
# written. Changed: `import skyhive as sky` for `import skyward as sky`, the provider (Local), and
# `.cuda()` removed (this machine has no GPU). Which block runs is the first argument (glue).
import sys

import skyhive as sky


@sky.compute
@sky.stdout(only="head")
def train() -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    rank = dist.get_rank()
    world_size = dist.get_world_size()

    model = nn.Linear(784, 10)
    model = DDP(model)

    x = torch.randn(1000, 784)
    y = torch.randint(0, 10, (1000,))
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(10):
        sampler.set_epoch(epoch)
        for batch_x, batch_y in loader:
            batch_x, batch_y = batch_x, batch_y
            loss = loss_fn(model(batch_x), batch_y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        print(f"Epoch {epoch}: loss={loss.item():.4f}")

    return {"final_loss": loss.item(), "rank": rank}


@sky.compute
def finetune():  # glue: the seed leaves `finetune` to the reader
    import os

    import torch.distributed as dist
    import transformers

    return {"rank": dist.get_rank(), "token_set": os.environ.get("HF_TOKEN") == "hf_xxx",
            "transformers": transformers.__version__}


which = sys.argv[1]

if which == "basic":
    with sky.ComputePool(
        provider=sky.Local(),
        accelerator="A100",
        nodes=4,
        plugins=[sky.plugins.torch()],
    ) as pool:
        results = train() @ pool
        for r in results:
            print(f"Rank {r['rank']}: loss={r['final_loss']:.4f}")

elif which == "vision":
    with sky.ComputePool(
        provider=sky.Local(),
        accelerator="A100",
        nodes=2,
        plugins=[sky.plugins.torch(vision="latest", audio="latest")],
    ) as pool:
        results = train() @ pool
    print("RANKS", sorted(r["rank"] for r in results))

elif which == "pinned":
    with sky.ComputePool(
        provider=sky.Local(),
        nodes=2,
        plugins=[sky.plugins.torch(version="2.3.0", vision="0.18.0", cuda="cu124")],
    ) as pool:
        results = train() @ pool

elif which == "cpu":
    with sky.ComputePool(
        provider=sky.Local(),
        nodes=4,
        plugins=[sky.plugins.torch(backend="gloo")],
    ) as pool:
        results = train() @ pool
    print("RANKS", sorted(r["rank"] for r in results))

elif which == "huggingface":
    with sky.ComputePool(
        provider=sky.Local(),
        accelerator="A100",
        nodes=2,
        plugins=[
            sky.plugins.torch(),
            sky.plugins.huggingface(token="hf_xxx"),
        ],
    ) as pool:
        results = finetune() @ pool
    print("RESULTS", results)
