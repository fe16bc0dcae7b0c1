# Seed 001 (the PyTorch guide, first version): `@sky.integrations.torch` below `@sky.compute`, a DDP
# model, a DistributedSampler and an all_reduce of the metrics. The seed shows these as line ranges
# of its example; this program writes them out the way the seed describes, on a Local pool without
# `plugins=` (the decorator alone sets the process group up).
import hashlib

import skyhive as sky


@sky.compute
@sky.integrations.torch
def train(epochs: int, batch_size: int) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    info = sky.instance_info()
    device = "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(100, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    ).to(device)

    if dist.is_initialized():
        model = DDP(model)

    g = torch.Generator().manual_seed(7)
    x = torch.randn(2000, 100, generator=g)
    y = torch.randint(0, 10, (2000,), generator=g)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        epoch_loss, correct, total = 0.0, 0, 0
        for bx, by in loader:
            out = model(bx)
            loss = loss_fn(out, by)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            correct += (out.argmax(1) == by).sum().item()
            total += len(by)
        stats = torch.tensor([epoch_loss, correct, total], dtype=torch.float64, device=device)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        avg_loss = stats[0].item() / (len(loader) * info.total_nodes)
        accuracy = 100.0 * stats[1].item() / stats[2].item()
        if info.is_head:
            print(f"Epoch {epoch}: loss={avg_loss:.4f} acc={accuracy:.1f}%")

    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return {"rank": dist.get_rank(), "world": dist.get_world_size(),
            "params": hashlib.sha256(params).hexdigest()[:16], "samples": len(sampler)}


if __name__ == "__main__":
    with sky.ComputePool(provider=sky.Local(), nodes=2) as pool:
        for r in train(epochs=2, batch_size=64) @ pool:
            print(f"RANK {r['rank']}/{r['world']} params={r['params']} samples={r['samples']}")
