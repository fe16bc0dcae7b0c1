"""The Local provider honours the Image: it runs only when this Python satisfies every package and
pin (the fast path), and otherwise refuses naming each package and the version found here — never
runs with other versions than asked."""

from __future__ import annotations

from importlib import metadata

import pytest

import skyhive as sky
from skyhive.runtime.bootstrap.local import check_local_image

PYTEST = metadata.version("pytest")


def test_satisfied_pins_and_constraints_pass():
    check_local_image(sky.Image(pip=[f"pytest=={PYTEST}", "pytest>=1", "anyio", 'nothing-here; python_version < "3"']),
                      node=0)


@pytest.mark.parametrize("req, words", [
    ("pytest==1.0.0", f"pytest==1.0.0 (this Python has pytest {PYTEST})"),
    ("pytest<2", f"this Python has pytest {PYTEST}"),
    ("no-such-package-xyz", "no-such-package-xyz (not installed)"),
])
def test_unsatisfied_packages_are_refused_naming_them(req, words):
    with pytest.raises(sky.ProvisionError, match="node 3") as err:
        check_local_image(sky.Image(pip=[req]), node=3)
    assert words in str(err.value)


def test_a_pool_with_a_pin_it_cannot_honour_starts_nothing():
    with pytest.raises(sky.ProvisionError, match=r"pytest==1\.0\.0"):
        with sky.Pool(provider=sky.Local(), image=sky.Image(pip=["pytest==1.0.0"])):
            pass  # pragma: no cover - never reached
