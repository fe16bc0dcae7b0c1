# Seed 000 (distributed-training concepts), "How It Works": the block as written; only the provider
# is Local. Glue (not in the seed) is marked; it reports what the seed says: the process group is
# already configured when the function body runs.
import skyhive as sky


@sky.compute
def train():
    import torch.distributed as dist
    # dist.is_initialized() is True — process group already configured
    ...
    return dist.is_initialized(), dist.get_rank(), dist.get_world_size()  # glue: report it


with sky.ComputePool(
    provider=sky.Local(),
    nodes=4,
    accelerator="A100",
    plugins=[sky.plugins.torch()],
) as pool:
    results = train() @ pool  # runs on all 4 nodes

print("RESULTS", results)  # glue
