"""`Image`: the environment of a node — Python, packages, environment variables, setup commands.

An `Image` is a frozen value. It is built and validated once on the client, may be changed only by
making a new one (`replace()`, the `with_*()` helpers that plugins use in `transform()`), and is
shipped to the node, whose bootstrap is cached by `content_hash()`.

Secret values (`secrets=`) are kept apart from plain `env=`: they never appear in `repr()`/`str()`,
nor in the canonical form that is hashed, and come out only through `all_env()` (to build the
process environment) and `secret_values()` (for the runtime's log redaction).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["Image", "PipIndex", "FrozenMap", "SecretMap"]

#: Bump when the canonical form changes, so old cache entries are not mistaken for new ones.
_CANONICAL_VERSION = 1

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PYTHON = re.compile(r"3\.\d{1,3}(\.\d{1,3})?\Z")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+\Z")
_SEQUENCE_FIELDS = ("pip", "pip_indexes", "find_links", "apt", "setup", "includes")


class FrozenMap(Mapping[str, str]):
    """A read-only, hashable, picklable mapping of str to str (the type of `Image.env`)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._data: dict[str, str] = dict(data)

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._data,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


class SecretMap(FrozenMap):
    """A `FrozenMap` whose `repr()` shows `'***'` for each value (the type of `Image.secrets`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({_masked(self)!r})"


class EnvMap(FrozenMap):
    """`Image.env`: the plain variables, which it lists, shows and hashes; reading a secret's name
    (`image.env["HF_TOKEN"]`, `"HF_TOKEN" in image.env`) gives the secret's value too, as Skyward's
    images (one `env`) answer — it is never listed, shown or hashed."""

    __slots__ = ("_secrets",)

    def __init__(self, data: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                 secrets: Mapping[str, str] | None = None) -> None:
        super().__init__(data)
        self._secrets: Mapping[str, str] = secrets if secrets is not None else {}

    def __getitem__(self, key: str) -> str:
        try:
            return self._data[key]
        except KeyError:
            return self._secrets[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data or key in self._secrets

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._data, self._secrets))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


@dataclass(frozen=True, slots=True)
class PipIndex:
    """A package index for `Image(pip_indexes=[...])`, the seeds' spelling: `PipIndex(url=...)`.

    `packages` names what the index is meant for; skyhive adds the index for every package (pip's
    `--extra-index-url` has no per-package scope), so list packages whose names the index does not
    shadow — see docs/seeds.md.
    """

    url: str
    packages: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not _URL.match(self.url):
            raise ValueError(f"PipIndex(url={self.url!r}) is not a URL (https://…, file://…)")
        object.__setattr__(self, "packages", _strings("PipIndex.packages", self.packages))


#: Skyward's `Image(skyward_source=...)` values (see `Image`).
SKYWARD_SOURCES = ("auto", "local", "github", "pypi")


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Image:
    """The environment of a node.

    Fields (lists and dicts are accepted and stored as tuples and read-only mappings):

    - ``python``: the Python version, ``"3.11"`` or ``"3.11.7"``; ``None`` uses the node's own.
    - ``pip``: requirement specifiers for ``pip install`` (``"numpy>=2"``, ``"torch==2.13.0"``).
    - ``pip_indexes``: package index URLs (``https://…``, ``file://…``).
    - ``find_links``: directories or URLs of wheels (pip's ``--find-links``).
    - ``apt``: Debian package names, one per entry.
    - ``env``: environment variables for the workers.
    - ``secrets``: environment variables whose values are secret (tokens, keys): never shown by
      ``repr()``/``str()``, hashed only as a digest, redacted from logs. A name may not be both in
      ``env`` and ``secrets``, and a secret may not be empty (it could not be redacted).
    - ``setup``: shell commands run in order after the packages are installed.
    - ``includes``: local paths (files or directories) copied to the node.
    - ``skyward_source``: Skyward's choice of where its own code on the nodes comes from (``"auto"``,
      ``"local"``, ``"github"``, ``"pypi"``). skyhive always ships the client's exact copy of itself
      to the nodes as wheels (a worker must speak the client's protocol version), which is what
      ``"local"`` asks for; every value is accepted so Skyward programs run as written, none changes
      the node's environment (it is not part of the content hash), and any other value is a
      ``ValueError``.

    Construction stores the entries as given (in order, duplicates kept); the ``with_*`` helpers
    add only what is not there yet. ``Image`` is immutable, hashable and compares by value.

    Raises (when built): ``TypeError`` for a wrongly typed field or entry (a bare ``str`` where a
    list is expected, a non-str env value) and ``ValueError`` for a bad value; both name the field.
    """

    # Annotated with what the constructor accepts; stored as tuples of str, a `FrozenMap` (env)
    # and a `SecretMap` (secrets).
    python: str | None = None
    pip: Sequence[str] = ()
    pip_indexes: Sequence[str | PipIndex] = ()
    find_links: Sequence[str] = ()
    apt: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=FrozenMap)
    secrets: Mapping[str, str] = field(default_factory=SecretMap)
    setup: Sequence[str] = ()
    includes: Sequence[str | os.PathLike[str]] = ()
    skyward_source: str = "auto"

    def __post_init__(self) -> None:
        if self.skyward_source not in SKYWARD_SOURCES:
            raise ValueError(f"Image.skyward_source must be one of {', '.join(map(repr, SKYWARD_SOURCES))}, "
                             f"got {self.skyward_source!r}")
        if self.python is not None:
            if not isinstance(self.python, str):
                raise TypeError(f"Image.python must be a str or None, got {_tname(self.python)}")
            if not _PYTHON.match(self.python):
                raise ValueError(
                    f"Image.python must look like '3.11' or '3.11.7', got {self.python!r}"
                )
        if not isinstance(self.pip_indexes, str):  # a `PipIndex` entry stands for its URL
            object.__setattr__(self, "pip_indexes", tuple(
                i.url if isinstance(i, PipIndex) else i for i in self.pip_indexes))
        for name in _SEQUENCE_FIELDS:
            object.__setattr__(self, name, _strings(name, getattr(self, name)))
        for url in self.pip_indexes:
            if not _URL.match(url):
                raise ValueError(
                    f"Image.pip_indexes entry {url!r} is not a URL (https://…, file://…)"
                )
        for pkg in self.apt:
            if any(c.isspace() for c in pkg):
                raise ValueError(
                    f"Image.apt entry {pkg!r} has whitespace: give one package per entry"
                )
        secrets = SecretMap(_env("secrets", self.secrets, secret=True))
        object.__setattr__(self, "env", EnvMap(_env("env", self.env, secret=False), secrets))
        object.__setattr__(self, "secrets", secrets)
        both = sorted(set(self.env) & set(self.secrets))
        if both:
            raise ValueError(
                f"Image.env and Image.secrets both set {', '.join(both)}: a variable is either "
                "plain or secret"
            )

    # -- changing (by making a new Image) ------------------------------------------------------

    def replace(self, **changes: Any) -> Image:
        """A new `Image` with the given fields replaced (validated like the constructor).

        Raises `TypeError` naming an unknown field, and whatever the constructor raises.
        """
        names = [f.name for f in fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"Image has no field {', '.join(unknown)} (fields: {', '.join(names)})")
        current = {name: getattr(self, name) for name in names}
        return Image(**{**current, **changes})

    def with_pip(self, *packages: str) -> Image:
        """A new `Image` with `packages` appended to `pip` (those already there are skipped)."""
        return self.replace(pip=_merged("pip", self.pip, packages))

    def with_pip_indexes(self, *urls: str) -> Image:
        """A new `Image` with `urls` appended to `pip_indexes` (those already there are skipped)."""
        return self.replace(pip_indexes=_merged("pip_indexes", self.pip_indexes, urls))

    def with_find_links(self, *paths: str) -> Image:
        """A new `Image` with `paths` appended to `find_links` (those already there are skipped)."""
        return self.replace(find_links=_merged("find_links", self.find_links, paths))

    def with_apt(self, *packages: str) -> Image:
        """A new `Image` with `packages` appended to `apt` (those already there are skipped)."""
        return self.replace(apt=_merged("apt", self.apt, packages))

    def with_setup(self, *commands: str) -> Image:
        """A new `Image` with `commands` appended to `setup` (those already there are skipped)."""
        return self.replace(setup=_merged("setup", self.setup, commands))

    def with_includes(self, *paths: str | os.PathLike[str]) -> Image:
        """A new `Image` with `paths` appended to `includes` (those already there are skipped)."""
        return self.replace(includes=_merged("includes", self.includes, paths))

    def with_env(self, **variables: str) -> Image:
        """A new `Image` with `variables` added to `env`.

        The other variables are kept; a name given here takes the new value. Raises `ValueError`
        if a name is already a secret.
        """
        return self.replace(env={**self.env, **variables})

    def with_secrets(self, **variables: str) -> Image:
        """A new `Image` with `variables` added to `secrets`.

        The other secrets are kept; a name given here takes the new value. Raises `ValueError` if
        a name is already a plain `env` variable.
        """
        return self.replace(secrets={**self.secrets, **variables})

    # -- reading -------------------------------------------------------------------------------

    def all_env(self) -> dict[str, str]:
        """The workers' environment variables: `env` plus `secrets` (with their values, in clear).

        This is the one call meant to hand secret values out; do not log its result.
        """
        return {**self.env, **self.secrets}

    def secret_values(self) -> frozenset[str]:
        """The secret values, for redacting them from output and events."""
        return frozenset(self.secrets.values())

    def canonical_json(self) -> str:
        """The canonical JSON form that `content_hash()` hashes.

        Keys sorted, no whitespace, ASCII only; lists keep their order, mappings are sorted by
        name. Each secret appears only as a sha256 digest of its name and value. ``includes`` are
        represented by their paths only: the content of included files is hashed by the bootstrap
        on the node side, when they are copied.
        """
        data: dict[str, Any] = {
            "version": _CANONICAL_VERSION,
            "python": self.python,
            **{name: list(getattr(self, name)) for name in _SEQUENCE_FIELDS},
            "env": dict(self.env),
            "secrets": {k: _secret_digest(k, v) for k, v in self.secrets.items()},
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def content_hash(self) -> str:
        """A hex sha256 of `canonical_json()`: the same in every process and Python run.

        It changes whenever any field does (including a secret's value and the order of list
        entries). The bootstrap caches a prepared node under it.
        """
        return hashlib.sha256(self.canonical_json().encode("ascii")).hexdigest()

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default or (not value and f.name in ("env", "secrets")):
                continue  # only the fields that differ from the defaults
            if f.name == "secrets":
                shown.append(f"secrets={_masked(value)!r}")
            elif isinstance(value, FrozenMap):
                shown.append(f"{f.name}={dict(value)!r}")
            else:
                shown.append(f"{f.name}={value!r}")
        return f"Image({', '.join(shown)})"


def _strings(name: str, values: Any) -> tuple[str, ...]:
    """`values` as a tuple of non-blank strings; `includes` also takes path objects."""
    if isinstance(values, (str, bytes, os.PathLike)) or not isinstance(values, Iterable):
        raise TypeError(
            f"Image.{name} must be a list of strings, got {_tname(values)}"
            + (f" (write [{values!r}])" if isinstance(values, (str, os.PathLike)) else "")
        )
    out = []
    for value in values:
        if name == "includes" and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise TypeError(f"Image.{name} entries must be strings, got {_tname(value)}")
        if not value.strip():
            raise ValueError(f"Image.{name} has an empty entry")
        if "\x00" in value or not _is_utf8(value):
            raise ValueError(
                f"Image.{name} entry {value!r} is not valid text (NUL or lone surrogate)"
            )
        out.append(value)
    return tuple(out)


def _env(name: str, mapping: Any, *, secret: bool) -> dict[str, str]:
    """Validate an `env`/`secrets` mapping; messages never include a secret value."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"Image.{name} must be a mapping of str to str, got {_tname(mapping)}")
    out = {}
    for key, value in mapping.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(
                f"Image.{name} key {key!r} is not a valid environment variable name "
                "(letters, digits and _, not starting with a digit)"
            )
        if not isinstance(value, str):
            hint = "" if secret else f" (write {str(value)!r})"
            raise TypeError(f"Image.{name}[{key!r}] must be a str, got {_tname(value)}{hint}")
        if "\x00" in value or not _is_utf8(value):
            raise ValueError(f"Image.{name}[{key!r}] is not valid text (NUL or lone surrogate)")
        if secret and not value:
            raise ValueError(f"Image.secrets[{key!r}] is empty: an empty secret cannot be redacted")
        out[key] = value
    return out


def _merged(name: str, current: Iterable[Any], new: Iterable[Any]) -> tuple[str, ...]:
    """`current` followed by the entries of `new` not already present, in order."""
    out = list(_strings(name, current))
    for value in _strings(name, new):
        if value not in out:
            out.append(value)
    return tuple(out)


def _secret_digest(key: str, value: str) -> str:
    return "sha256:" + hashlib.sha256(f"skyhive-secret\x00{key}\x00{value}".encode()).hexdigest()


def _is_utf8(text: str) -> bool:
    """False for strings with lone surrogates, which no environment or file name can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _masked(secrets: Mapping[str, str]) -> dict[str, str]:
    return {k: "***" for k in secrets}


def _tname(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
