"""`Image`: frozen, validated, merged without clobbering, hashed stably, secrets kept hidden."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import pickle
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.plugins.image import FrozenMap, Image, SecretMap

# Speed is measured in bench/, never asserted in a test: no Hypothesis deadline.
no_deadline = settings(deadline=None)

SECRET = "hf_s3cr3t-VALUE-4242"

FULL = dict(
    python="3.11",
    pip=["numpy>=2", "torch==2.13.0"],
    pip_indexes=["https://download.pytorch.org/whl/cpu"],
    find_links=["/opt/wheels"],
    apt=["git"],
    env={"OMP_NUM_THREADS": "4"},
    secrets={"HF_TOKEN": SECRET},
    setup=["echo ready"],
    includes=["src/"],
)


def full(**changes):
    return Image(**{**FULL, **changes})


# -- storage and immutability -----------------------------------------------------------------


def test_defaults():
    image = Image()
    assert image.python is None
    assert image.pip == image.pip_indexes == image.find_links == image.apt == ()
    assert image.setup == image.includes == ()
    assert dict(image.env) == dict(image.secrets) == {}
    assert image.all_env() == {} and image.secret_values() == frozenset()


def test_lists_and_dicts_are_stored_immutably():
    env = {"A": "1"}
    pip = ["numpy"]
    image = Image(pip=pip, env=env, includes=[pathlib.Path("data")])
    env["B"] = "2"
    pip.append("torch")
    assert image.pip == ("numpy",) and isinstance(image.pip, tuple)
    assert image.includes == ("data",)
    assert isinstance(image.env, FrozenMap) and dict(image.env) == {"A": "1"}
    assert isinstance(full().secrets, SecretMap)


def test_cannot_be_changed_in_place():
    image = full()
    with pytest.raises(dataclasses.FrozenInstanceError):
        image.pip = ("x",)  # type: ignore[misc]
    with pytest.raises(TypeError):
        image.env["A"] = "1"  # type: ignore[index]
    with pytest.raises(TypeError):
        image.secrets["A"] = "1"  # type: ignore[index]
    with pytest.raises(AttributeError):
        image.pip.append("x")  # type: ignore[attr-defined]


def test_keyword_arguments_only():
    with pytest.raises(TypeError):
        Image("3.11")  # type: ignore[misc]


def test_equal_by_value_and_hashable():
    assert full() == full(env={"OMP_NUM_THREADS": "4"})
    assert hash(full()) == hash(full())
    assert {full(): 1}[full()] == 1
    assert full() != full(apt=["git", "curl"])


# -- replace and the with_* helpers -----------------------------------------------------------


def test_replace_returns_a_new_validated_image():
    image = full()
    other = image.replace(python="3.12", pip=["requests"])
    assert other.python == "3.12" and other.pip == ("requests",)
    assert other.env == image.env and other.secrets == image.secrets
    assert image.python == "3.11" and image.pip == ("numpy>=2", "torch==2.13.0")
    with pytest.raises(ValueError, match="Image.python"):
        image.replace(python="three")


def test_replace_names_unknown_fields():
    with pytest.raises(TypeError, match="Image has no field pipp, zzz"):
        Image().replace(pipp=["x"], zzz=1)


@pytest.mark.parametrize(
    ("method", "field", "start", "added", "expected"),
    [
        ("with_pip", "pip", ["a", "b"], ["b", "c", "a", "d"], ("a", "b", "c", "d")),
        (
            "with_pip_indexes",
            "pip_indexes",
            ["file:///x"],
            ["https://y", "file:///x"],
            ("file:///x", "https://y"),
        ),
        ("with_find_links", "find_links", ["/w"], ["/v", "/w", "/v"], ("/w", "/v")),
        ("with_apt", "apt", ["git"], ["curl", "git"], ("git", "curl")),
        ("with_setup", "setup", ["make"], ["make", "make install"], ("make", "make install")),
        ("with_includes", "includes", ["src"], ["src", "data"], ("src", "data")),
    ],
)
def test_with_adds_without_clobbering_or_duplicating(method, field, start, added, expected):
    image = Image(**{field: start})
    other = getattr(image, method)(*added)
    assert getattr(other, field) == expected
    assert getattr(image, field) == tuple(start)  # the original is untouched
    assert getattr(getattr(other, method)(*added), field) == expected  # idempotent


def test_with_helpers_validate():
    with pytest.raises(ValueError, match="Image.pip has an empty entry"):
        Image().with_pip("numpy", "")
    with pytest.raises(ValueError, match="Image.pip_indexes entry 'pypi' is not a URL"):
        Image().with_pip_indexes("pypi")


def test_with_env_merges():
    image = Image(env={"A": "1", "B": "2"})
    other = image.with_env(B="20", C="3")
    assert dict(other.env) == {"A": "1", "B": "20", "C": "3"}
    assert dict(image.env) == {"A": "1", "B": "2"}


def test_with_secrets_merges():
    image = Image(secrets={"TOKEN": "t1"})
    other = image.with_secrets(KEY="k1")
    assert other.all_env() == {"TOKEN": "t1", "KEY": "k1"}
    assert other.with_secrets(TOKEN="t2").secret_values() == {"t2", "k1"}


def test_a_name_is_either_plain_or_secret():
    with pytest.raises(ValueError, match="both set TOKEN"):
        Image(secrets={"TOKEN": "t"}).with_env(TOKEN="x")
    with pytest.raises(ValueError, match="both set A"):
        Image(env={"A": "1"}).with_secrets(A="x")


# -- content_hash -----------------------------------------------------------------------------


def test_canonical_form_is_pinned():
    """Cached nodes are found by this hash: changing the form must be deliberate (bump version)."""
    image = Image(python="3.11", pip=["numpy"], env={"B": "2", "A": "1"}, includes=["src"])
    assert image.canonical_json() == (
        '{"apt":[],"env":{"A":"1","B":"2"},"find_links":[],"includes":["src"],"pip":["numpy"],'
        '"pip_indexes":[],"python":"3.11","secrets":{},"setup":[],"version":1}'
    )
    assert image.content_hash() == hashlib.sha256(image.canonical_json().encode()).hexdigest()


def test_hash_is_the_same_in_another_process():
    code = f"from skyhive.plugins.image import Image; print(Image(**{FULL!r}).content_hash())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONHASHSEED": "999"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == full().content_hash()
    assert len(out.strip()) == 64 and int(out, 16) >= 0


def test_hash_ignores_mapping_order():
    a = Image(env={"A": "1", "B": "2"}, secrets={"X": "x", "Y": "y"})
    b = Image(env={"B": "2", "A": "1"}, secrets={"Y": "y", "X": "x"})
    assert a.content_hash() == b.content_hash()


@pytest.mark.parametrize(
    "change",
    [
        dict(python=None),
        dict(python="3.11.7"),
        dict(pip=["numpy>=2"]),
        dict(pip=["torch==2.13.0", "numpy>=2"]),  # order matters to pip
        dict(pip_indexes=[]),
        dict(find_links=["/opt/other"]),
        dict(apt=["git", "curl"]),
        dict(env={"OMP_NUM_THREADS": "8"}),
        dict(env={}),
        dict(secrets={"HF_TOKEN": SECRET + "x"}),
        dict(secrets={"HF_TOKEN2": SECRET}),
        dict(setup=["echo ready", "echo again"]),
        dict(includes=["src/", "data/"]),
    ],
    ids=lambda change: next(iter(change)),
)
def test_hash_changes_when_any_field_changes(change):
    assert full(**change).content_hash() != full().content_hash()


def test_every_field_is_in_the_canonical_form():
    import json

    keys = set(json.loads(Image().canonical_json())) - {"version"}
    # skyward_source (Skyward's spelling) changes nothing on the node: skyhive always ships its own copy
    assert keys == {f.name for f in dataclasses.fields(Image)} - {"skyward_source"}


# Small fixed alphabets keep generation cheap (no Unicode tables) yet include non-ASCII text.
_FIRST = "AZaz_"
names = st.builds(str.__add__, st.sampled_from(_FIRST), st.text(_FIRST + "09", max_size=5))
texts = st.text("aZ09 -=/.é☃\U0001f600", max_size=8)
entries = texts.filter(str.strip)
entry_lists = st.lists(entries, max_size=3)


@st.composite
def images(draw):
    env = draw(st.dictionaries(names, texts, max_size=3))
    secrets = draw(
        st.dictionaries(names.filter(lambda n: n not in env), texts.filter(bool), max_size=2)
    )
    return Image(
        python=draw(st.none() | st.sampled_from(["3.10", "3.11", "3.12.1"])),
        pip=draw(entry_lists),
        pip_indexes=draw(st.lists(st.sampled_from(["https://a/simple", "file:///b"]), max_size=2)),
        find_links=draw(entry_lists),
        apt=draw(st.lists(st.sampled_from(["git", "curl", "jq"]), max_size=2)),
        env=env,
        secrets=secrets,
        setup=draw(entry_lists),
        includes=draw(entry_lists),
    )


@no_deadline
@given(images(), images())
def test_hash_equal_exactly_when_images_equal(a, b):
    assert (a.content_hash() == b.content_hash()) == (a == b)


@no_deadline
@given(images())
def test_hash_survives_pickling_and_replace(image):
    assert pickle.loads(pickle.dumps(image)).content_hash() == image.content_hash()
    assert image.replace().content_hash() == image.content_hash()


# -- secrets ----------------------------------------------------------------------------------


def test_secrets_are_not_shown():
    image = full()
    for text in (
        repr(image),
        str(image),
        repr(image.secrets),
        str(image.secrets),
        image.canonical_json(),
        f"{image}",
        repr([image]),
    ):
        assert SECRET not in text
    assert "HF_TOKEN" in repr(image) and "'***'" in repr(image)
    assert repr(image.with_pip("x")).count("***") == 1


def test_repr_shows_what_was_set():
    assert repr(Image()) == "Image()"
    assert repr(Image(pip=["numpy"], env={"A": "1"})) == "Image(pip=('numpy',), env={'A': '1'})"


def test_secrets_come_out_only_where_asked():
    image = full()
    assert image.all_env() == {"OMP_NUM_THREADS": "4", "HF_TOKEN": SECRET}
    assert image.secret_values() == {SECRET}


def test_pickle_keeps_secrets():
    """The runtime ships the Image to the node, which needs the values."""
    image = full()
    clone = pickle.loads(pickle.dumps(image))
    assert clone == image and clone.all_env()["HF_TOKEN"] == SECRET
    assert isinstance(clone.secrets, SecretMap) and isinstance(clone.env, FrozenMap)


def test_errors_about_secrets_do_not_show_the_value():
    with pytest.raises(ValueError) as info:
        Image(env={"K": "plain"}, secrets={"K": SECRET})
    assert SECRET not in str(info.value)
    with pytest.raises(TypeError) as info:
        Image(secrets={"K": 12345})
    assert "12345" not in str(info.value) and "Image.secrets['K'] must be a str" in str(info.value)


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(python="3"), ValueError, r"Image\.python must look like '3\.11'"),
        (dict(python="python3.11"), ValueError, r"Image\.python"),
        (dict(python=3.11), TypeError, r"Image\.python must be a str or None, got float"),
        (dict(pip="numpy"), TypeError, r"Image\.pip must be a list of strings, got str"),
        (dict(pip=["numpy", ""]), ValueError, r"Image\.pip has an empty entry"),
        (dict(pip=["  "]), ValueError, r"Image\.pip has an empty entry"),
        (dict(pip=[b"numpy"]), TypeError, r"Image\.pip entries must be strings, got bytes"),
        (dict(pip=None), TypeError, r"Image\.pip must be a list of strings, got NoneType"),
        (dict(pip_indexes=["pypi.org/simple"]), ValueError, r"Image\.pip_indexes entry"),
        (dict(find_links=[""]), ValueError, r"Image\.find_links has an empty entry"),
        (dict(apt=["git curl"]), ValueError, r"Image\.apt entry 'git curl' has whitespace"),
        (dict(setup="make"), TypeError, r"Image\.setup must be a list"),
        (dict(setup=[1]), TypeError, r"Image\.setup entries must be strings, got int"),
        (dict(includes=pathlib.Path("src")), TypeError, r"Image\.includes must be a list"),
        (dict(includes=[3]), TypeError, r"Image\.includes entries must be strings"),
        (dict(env=[("A", "1")]), TypeError, r"Image\.env must be a mapping"),
        (dict(env={"1ABC": "x"}), ValueError, r"Image\.env key '1ABC' is not a valid"),
        (dict(env={"A-B": "x"}), ValueError, r"Image\.env key 'A-B'"),
        (dict(env={"": "x"}), ValueError, r"Image\.env key ''"),
        (dict(env={"N": 4}), TypeError, r"Image\.env\['N'\] must be a str, got int \(write '4'\)"),
        (dict(env={"N": "a\x00b"}), ValueError, r"Image\.env\['N'\] is not valid text"),
        (dict(secrets={"N": "\ud800"}), ValueError, r"Image\.secrets\['N'\] is not valid text"),
        (dict(pip=["a\x00"]), ValueError, r"Image\.pip entry 'a\\x00' is not valid text"),
        (dict(setup=["\udcff"]), ValueError, r"Image\.setup entry .* is not valid text"),
        (dict(secrets={"MY TOKEN": "x"}), ValueError, r"Image\.secrets key 'MY TOKEN'"),
        (dict(secrets={"T": ""}), ValueError, r"Image\.secrets\['T'\] is empty"),
        (dict(env={"T": "a"}, secrets={"T": "b"}), ValueError, r"Image\.env and Image\.secrets"),
    ],
)
def test_validation_errors_name_the_field(kwargs, error, message):
    with pytest.raises(error, match=message):
        Image(**kwargs)


def test_valid_values_are_accepted():
    image = Image(
        python="3.12.1",
        pip_indexes=["file:///opt/pypi/simple"],
        env={"_X1": "", "lower_ok": "v"},
        apt=["libgl1:amd64"],
    )
    assert image.python == "3.12.1" and image.env["_X1"] == ""
