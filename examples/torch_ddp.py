"""PyTorch DDP on a pool of two nodes — no launch script, no MASTER_ADDR to set.

    python examples/torch_ddp.py

Needs the torch extra (not in the demo's set-up): `.venv/bin/python -m pip install -e '.[torch]'`
(from the repository root; `python3 dev.py test` installs it too).

The torch plugin sets the distributed environment and calls `init_process_group()` on every node
before the function runs. The function is a standard DDP loop: a `DistributedSampler` gives each
node its own part of the data, DDP averages the gradients, and `all_reduce` aggregates the metrics.
Only the head node prints its epoch lines. Every node returns a hash of its parameters: they are the
same on all nodes, although each node trained on different samples.
"""

from __future__ import annotations

import hashlib

import skyhive as sky


@sky.compute
@sky.stdout(only="head")
def train(epochs: int, batch_size: int, lr: float) -> dict:
    """Train a small classifier with DistributedDataParallel; return this rank's summary."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    if dist.is_initialized():
        model = DDP(model)

    g = torch.Generator().manual_seed(1234)  # the same dataset on every node...
    x = torch.randn(2048, 20, generator=g)
    y = x[:, :4].argmax(dim=1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)  # ...each node sees its own part
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    first_epoch = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        if epoch == 0:
            first_epoch = list(sampler)
        epoch_loss, correct, total = 0.0, 0, 0
        for batch_x, batch_y in loader:
            out = model(batch_x)
            loss = loss_fn(out, batch_y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            correct += (out.argmax(dim=1) == batch_y).sum().item()
            total += len(batch_y)

        stats = torch.tensor([epoch_loss, correct, total], dtype=torch.float64)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        avg_loss = stats[0].item() / (len(loader) * dist.get_world_size())
        accuracy = 100.0 * stats[1].item() / stats[2].item()
        print(f"Epoch {epoch}: loss={avg_loss:.4f} accuracy={accuracy:.1f}%")

    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "loss": avg_loss,
        "accuracy": accuracy,
        "params": hashlib.sha256(params).hexdigest(),
        "samples": first_epoch,  # the dataset indices this rank trained on in epoch 0
    }


def main() -> list[dict]:
    with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.torch()]) as pool:
        results = train(epochs=3, batch_size=64, lr=0.2) @ pool
    for r in results:
        print(f"Rank {r['rank']}/{r['world_size']}: loss={r['loss']:.4f} accuracy={r['accuracy']:.1f}% "
              f"params={r['params'][:16]} samples={len(r['samples'])}")
    same = len({r["params"] for r in results}) == 1
    disjoint = not set(results[0]["samples"]) & set(results[1]["samples"])
    print(f"identical parameters on every rank: {same}; ranks trained on different data: {disjoint}")
    return results


if __name__ == "__main__":
    main()
