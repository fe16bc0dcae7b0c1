"""Streaming, three ways: a generator function's items come back as they are yielded; a generator
argument goes to the node as its items; both at once.

    python examples/streaming.py
"""

from __future__ import annotations

from collections.abc import Iterator

import skyhive as sky


@sky.function
def fibonacci(n: int):
    """Output streaming: each number is sent as soon as it is yielded."""
    a, b = 0, 1
    for _ in range(n):
        yield a
        a, b = b, a + b


@sky.function
def running_mean(values: Iterator[float]) -> list[float]:
    """Input streaming: the generator passed in arrives as an iterator over its items."""
    total, means = 0.0, []
    for i, x in enumerate(values, 1):
        total += x
        means.append(round(total / i, 3))
    return means


@sky.function
def moving_average(values: Iterator[float], window: int = 3):
    """Both: items in, averages out as they are computed."""
    from collections import deque

    recent: deque[float] = deque(maxlen=window)
    for x in values:
        recent.append(x)
        yield round(sum(recent) / len(recent), 3)


if __name__ == "__main__":
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        print("fibonacci:", [x for x in fibonacci(10) >> compute])
        print("running mean:", running_mean(x / 2 for x in range(1, 6)) >> compute)
        print("moving average:", list(moving_average((float(x) for x in range(1, 7)), window=3) >> compute))
