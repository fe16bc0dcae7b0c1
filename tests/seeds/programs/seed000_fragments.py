# Seed 000 (distributed-training concepts): the shard, runtime-context and output-control blocks, as
# written. The seed leaves `fit`, `coordinate_others`, `process`, `epoch` and `loss` to the reader;
# the glue below (marked) defines them and runs each block on a Local pool of 3 nodes.
import skyhive as sky

epoch, loss = 1, 0.25  # glue: the names the output-control block prints


def fit(x, y):  # glue: "training" returns the shard it saw
    return list(x), list(y)


def coordinate_others():  # glue
    print("coordinating")


def process(data):  # glue
    return sum(data)


@sky.compute
def train(x_full, y_full):
    x, y = sky.shard(x_full, y_full, shuffle=True, seed=42)
    # x[i] still corresponds to y[i]
    return fit(x, y)


@sky.compute
def distributed_task(data):
    info = sky.instance_info()
    print(f"Node {info.node} of {info.total_nodes}")

    if info.is_head:
        coordinate_others()

    return process(data)


@sky.compute
@sky.stdout(only="head")
def train_quiet():  # the seed calls it `train`; renamed here only because the shard block uses that name
    print(f"Epoch {epoch}: loss={loss:.4f}")  # only head node prints


@sky.compute
@sky.stdout(only="head")
def train_empty():
    ...


if __name__ == "__main__":
    with sky.ComputePool(provider=sky.Local(), nodes=3) as pool:  # glue: the pool
        x_full = list(range(100))
        y_full = [f"label-{i}" for i in x_full]
        print("SHARDS", train(x_full, y_full) @ pool)
        print("TASKS", distributed_task([1, 2, 3]) @ pool)
        train_quiet() @ pool
        print("EMPTY", train_empty() @ pool)
