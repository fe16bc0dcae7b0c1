# Seed 002 (the PyTorch guide, second version): `sky.Compute` with `accelerator=sky.accelerators.T4()`
# and `plugins=[sky.plugins.torch()]`, `@sky.function`, and the model / data-loading / metrics
# fragments exactly as the seed prints them, put together in the order the guide explains them.
# Changed: the provider (Local, which has no T4: it warns and runs on the CPU), and the parameter
# digest returned at the end (glue, so the test can check DDP kept the ranks identical).
import hashlib

import skyhive as sky


@sky.function
def train(epochs: int, batch_size: int, lr: float) -> dict:
    """Train a neural network with DistributedDataParallel."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    info = sky.instance_info()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    model = nn.Sequential(
        nn.Linear(100, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    ).to(device)

    if dist.is_initialized():
        model = DDP(model)

    x = torch.randn(10000, 100)
    y = torch.randint(0, 10, (10000,))
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        epoch_loss, correct, total = 0.0, 0, 0
        for batch_x, batch_y in loader:
            batch_x, batch_y = batch_x.to(device), batch_y.to(device)
            out = model(batch_x)
            loss = loss_fn(out, batch_y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            correct += (out.argmax(dim=1) == batch_y).sum().item()
            total += len(batch_y)

        stats = torch.tensor([epoch_loss, correct, total], dtype=torch.float64, device=device)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        avg_loss = stats[0].item() / (len(loader) * info.total_nodes)
        accuracy = 100.0 * stats[1].item() / stats[2].item()
        if info.is_head:
            print(f"Epoch {epoch}: loss={avg_loss:.4f} acc={accuracy:.1f}%")

    digest = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters()))
    return {"rank": dist.get_rank(), "params": digest.hexdigest()[:16], "samples": len(sampler)}  # glue


if __name__ == "__main__":
    with sky.Compute(
        provider=sky.Local(),
        nodes=2,
        accelerator=sky.accelerators.T4(),
        plugins=[sky.plugins.torch()],
    ) as compute:
        results = train(epochs=2, batch_size=128, lr=0.05) @ compute
    for r in results:
        print(f"RANK {r['rank']} params={r['params']} samples={r['samples']}")
