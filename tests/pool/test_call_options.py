"""`pool.options(...)`: a call's options with their own spelling, so that `run`/`broadcast` have one
signature typed by the function alone (issue 39 point 7; the type checkers' side is
tests/test_typing_user.py). The view passes every argument, keywords included, to the function; the
keyword spelling (`pool.run(fn, x, timeout=...)`) keeps working as before. Real Local workers."""

from __future__ import annotations

from pathlib import Path

import pytest

import skyhive as sky

pytestmark = pytest.mark.anyio


def echo(x: int, timeout: float | None = None, output: str | None = None, retries: int | None = None,
         capture: bool | None = None) -> tuple[object, ...]:
    """A function whose own keywords are named like the call options."""
    return (x, timeout, output, retries, capture)


def shout(x: int) -> int:
    print(f"said {x}", flush=True)
    return x


def fails_twice(counter: str) -> str:
    path = Path(counter)
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    if n < 3:
        raise ConnectionError(f"flaky service, try {n}")
    return f"ok after {n}"


def test_options_apply_to_the_call_and_every_argument_goes_to_the_function(tmp_path):
    with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        view = pool.options(timeout=60, retries=1)
        assert view.run(echo, 1, timeout=5, output="o", retries=2, capture=True) == (1, 5, "o", 2, True)
        assert view.broadcast(echo, 2, retries=3) == [(2, None, None, 3, None)] * 2
        captured = pool.options(capture=True).run(shout, 3)
        assert isinstance(captured, sky.Captured) and captured.value == 3 and "said 3" in captured.stdout
        each = pool.options(capture=True, output=None).broadcast(shout, 4)
        assert sorted(c.node for c in each) == [0, 1] and all("said 4" in c.stdout for c in each)
        counter = str(tmp_path / "count")
        assert pool.options(retries=2, retry_on=ConnectionError).run(fails_twice, counter) == "ok after 3"
        assert pool.statistics()["retries"] == 2


def test_the_keyword_spelling_still_takes_the_options_out(tmp_path):
    with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        assert pool.run(echo, 1, retries=0, timeout=60, output=None) == (1, None, None, None, None)
        assert pool.run(echo, 1, output="all") == (1, None, None, None, None)  # `output` is the call's, as always
        captured = pool.run(shout, 5, capture=True)
        assert isinstance(captured, sky.Captured) and captured.value == 5
        assert pool.broadcast(echo, 2, timeout=60) == [(2, None, None, None, None)]
        counter = str(tmp_path / "count")
        with pytest.raises(ConnectionError, match="try 1"):
            pool.run(fails_twice, counter, retries=2)  # not named in retry_on: not retried
        assert pool.run(fails_twice, counter, retries=2, retry_on=(ConnectionError,)) == "ok after 3"


@pytest.mark.parametrize(("options", "words"), [
    ({"timeout": 0}, "options(timeout=0): need a positive number of seconds"),
    ({"timeout": "soon"}, "options(timeout='soon')"),
    ({"timeout": True}, "options(timeout=True)"),
    ({"retries": -1}, "options(retries=-1): need a whole number"),
    ({"output": [0]}, "output=[0]: pass the node indexes as a tuple"),
    ({"output": "every"}, "is not an output selection"),
])
def test_a_wrong_option_is_refused_where_it_is_given_before_anything_is_sent(options, words):
    with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        with pytest.raises(ValueError) as info:
            pool.options(**options)
        assert words in str(info.value)
        assert pool.state.tasks_submitted == 0


async def test_an_async_pools_options_give_awaitables():
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        view = pool.options(capture=True)
        captured = await view.run(shout, 6)
        assert isinstance(captured, sky.Captured) and captured.value == 6 and "said 6" in captured.stdout
        assert [c.value for c in await view.broadcast(shout, 7)] == [7, 7]
        assert await pool.options(timeout=60).run(echo, 8, timeout=1) == (8, 1, None, None, None)
        with pytest.raises(ValueError, match="need a positive number"):
            pool.options(timeout=-1)
