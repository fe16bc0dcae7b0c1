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
        later: float = pool.run(add, 1, "x", timeout=5.0)
        items: list[int] = [i for i in count(3) >> pool]
        future = pool.submit(add, 2, "y")
        done: float = future.result()
        pair: tuple[int, int] = sky.gather(square(2), square(3)) >> pool
        print(one, every, total, each, later, items, done, pair)


async def concurrent() -> None:
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        one: int = await (square(3) >> pool)
        every: list[int] = await (square(3) @ pool)
        total: float = await pool.run(add, 1, "x")
        each: list[float] = await pool.broadcast(add, 1, "x", retries=2)
        items: list[int] = [i async for i in count(3) >> pool]
        pair: tuple[int, int] = await (sky.gather(square(2), square(3)) >> pool)
        print(one, every, total, each, items, pair)


def mistakes() -> None:
    with sky.Pool(nodes=1) as pool:
        pool.run(add, "one", "x")  # E: a str for an int
        square("three")  # E: a str for an int
        wrong: str = square(3) >> pool  # E: an int is not a str
        wrong_pair: tuple[str, int] = sky.gather(square(2), square(3)) >> pool  # E: gather's results are typed


blocking()
anyio.run(concurrent)
