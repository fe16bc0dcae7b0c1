from __future__ import annotations

from collections.abc import Iterator

import anyio

import skyhive as sky


@sky.compute
def square(x: int) -> int:
    return x * x


@sky.compute
def count(n: int) -> Iterator[int]:
    yield from range(n)


def add(a: int, b: str) -> float:
    return a + len(b)


def blocking() -> None:
    with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        one: int = square(3) >> pool
        every: list[int] = square(3) @ pool
        total: float = pool.run(add, 1, "x")
        each: list[float] = pool.broadcast(add, 1, b="x")
        later: float = pool.options(timeout=5.0).run(add, 1, "x")
        kept: list[float] = pool.options(retries=1, capture=False).broadcast(add, 1, b="x")
        items: list[int] = [i for i in count(3) >> pool]
        future = pool.submit(add, 2, "y")
        done: float = future.result()
        pair: tuple[int, int] = sky.gather(square(2), square(3)) >> pool
        print(one, every, total, each, later, kept, items, done, pair)


async def concurrent() -> None:
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        one: int = await (square(3) >> pool)
        every: list[int] = await (square(3) @ pool)
        total: float = await pool.run(add, 1, "x")
        each: list[float] = await pool.options(retries=2).broadcast(add, 1, "x")
        later: float = await pool.options(timeout=5.0, output=None).run(add, 1, b="x")
        items: list[int] = [i async for i in count(3) >> pool]
        pair: tuple[int, int] = await (sky.gather(square(2), square(3)) >> pool)
        print(one, every, total, each, later, items, pair)


def mistakes() -> None:
    # each one line: `run`/`broadcast` have one signature (no "No overload variant" and a list of them)
    with sky.Pool(nodes=1) as pool:
        pool.run(add, "one", "x")  # E: a str for an int
        pool.broadcast(add, 1, 2)  # E: an int for a str
        pool.options(timeout=5.0).run(add, 1)  # E: b is missing
        pool.options(timeout="soon")  # E: a str for a timeout
        square("three")  # E: a str for an int
        wrong: str = square(3) >> pool  # E: an int is not a str
        wrong_pair: tuple[str, int] = sky.gather(square(2), square(3)) >> pool  # E: gather's results are typed


blocking()
anyio.run(concurrent)
