"""`sky.plugins.huggingface(token=...)`: the HuggingFace libraries on the nodes, logged in with a token.

The token travels one way only: as the secret environment variable `HF_TOKEN` of the image
(`Image.with_secrets`), which the runtime redacts from every event, output line and log record. The
plugin object keeps it for `transform` but drops it when pickled to the workers, and shows `***` in
its repr. On the worker, "logging in" means the token is in the process environment, where every
HuggingFace library looks first (`HF_TOKEN`; the legacy `HUGGING_FACE_HUB_TOKEN` is set too):
nothing is written to disk, so a node shared with other users (or the Local provider, which runs
on your own machine) keeps its own `~/.cache/huggingface/token`. With `validate=True` the token is
also checked against the Hub (`whoami`) when the worker starts; a failure says so without the token.
The worker's log handlers (whose records reach the client's logs) get a filter that redacts the token.

Skyward's plugin object is read too: `bootstrap(pool)` gives the shell commands the plugin adds to the
node's setup (a check that `huggingface_hub` imports, and a `snapshot_download` of each of `models=`,
Skyward's pre-download), `decorate` and `around_client` are None (no such hook), and the transformed
image answers `image.env["HF_TOKEN"]` (a secret: read through `env`, never listed or shown by it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import HuggingFaceLoginError
from .api import InstanceInfo, Plugin

if TYPE_CHECKING:
    from .image import Image

__all__ = ["HuggingFacePlugin", "huggingface", "HuggingFaceLoginError", "PACKAGES", "TOKEN_ENV"]

PACKAGES = ("transformers", "datasets", "tokenizers", "huggingface_hub")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
TOKEN_ENV = "HF_TOKEN"
_LEGACY_ENV = "HUGGING_FACE_HUB_TOKEN"
REDACTED = "***"


class HuggingFacePlugin(Plugin):
    """See `huggingface()`. The token is never pickled, printed or put in an error message."""

    name = "huggingface"
    decorate = None  # Skyward's hooks this plugin does not have
    around_client = None

    def __init__(self, token: str | None = None, *, packages: Sequence[str] = PACKAGES,
                 validate: bool = False, models: Sequence[str] = ()) -> None:
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        elif not isinstance(token, str) or not token.strip():
            raise ValueError("huggingface(token=...) must be a non-empty string (or None to read $HF_TOKEN)")
        if isinstance(packages, str):
            raise TypeError(f"huggingface(packages=...) must be a list of requirements, not a str "
                            f"(write [{packages!r}])")
        if isinstance(models, str) or not all(isinstance(m, str) and _REPO.match(m) for m in models):
            raise ValueError(f"huggingface(models={models!r}): give a list of Hub repo ids such as [\"org/model\"]")
        self._token = token
        self.models = tuple(models)
        self.packages = tuple(packages) + (("huggingface_hub",) if "huggingface_hub" not in packages else ())
        self.validate = validate
        self.expects_token = token is not None

    def __repr__(self) -> str:
        return f"<plugin huggingface token={REDACTED if self.expects_token else None}>"

    def __getstate__(self) -> dict[str, Any]:
        # the workers get the token from their environment, never from the pickled plugin
        return {**self.__dict__, "_token": None}

    def transform(self, image: Image, pool: Any) -> Image:
        """Add the HuggingFace packages, Xet's fast downloads (`HF_XET_HIGH_PERFORMANCE=1`, as Skyward
        does), the `bootstrap` commands and, when there is a token, `HF_TOKEN` as a secret."""
        image = image.with_pip(*self.packages).with_setup(*self.bootstrap(pool))
        if "HF_XET_HIGH_PERFORMANCE" not in image.env and "HF_XET_HIGH_PERFORMANCE" not in image.secrets:
            image = image.with_env(HF_XET_HIGH_PERFORMANCE="1")
        if self._token is not None:
            image = image.with_secrets(**{TOKEN_ENV: self._token})
        return image

    def bootstrap(self, pool: Any) -> tuple[str, ...]:
        """The shell commands this plugin adds to each node's setup (run in the node's environment,
        with the image's variables): `huggingface_hub` must import, then each of `models` is
        downloaded into the node's HuggingFace cache (`from_pretrained` then reads it from disk)."""
        check = "python -c 'import huggingface_hub as h; print(\"huggingface_hub\", h.__version__)'"
        if not self.models:
            return (check,)
        repos = ", ".join(f'"{m}"' for m in self.models)
        download = ("python -c 'from huggingface_hub import snapshot_download; "
                    f"[print(\"cached\", r, \"->\", snapshot_download(r), flush=True) for r in [{repos}]]'")
        return (check, download)

    @contextlib.contextmanager
    def around_app(self, info: InstanceInfo) -> Iterator[None]:
        """Once per worker process: make the token the one the HuggingFace libraries use.

        Raises `HuggingFaceLoginError` when the token is missing from the worker's environment or,
        with `validate=True`, when the Hub does not accept it.
        """
        token = os.environ.get(TOKEN_ENV)
        if not token:
            if self.expects_token:
                raise HuggingFaceLoginError(
                    f"huggingface plugin: ${TOKEN_ENV} is not set on node {info.node} "
                    "(was the pool's image built without the plugin's transform?)"
                )
            yield
            return
        os.environ[_LEGACY_ENV] = token
        redactor = _Redactor(token)
        handlers = list(logging.getLogger().handlers)  # the worker's log goes to the client's logs
        for handler in handlers:
            handler.addFilter(redactor)
        try:
            if self.validate:
                _check(token, info)
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(redactor)


class _Redactor(logging.Filter):
    """Replaces the token in every record a worker handler emits (message, arguments, traceback)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record: let the handler report it as usual
            return True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = message.replace(self.token, REDACTED), ()
        if record.exc_text:
            record.exc_text = record.exc_text.replace(self.token, REDACTED)
        if record.stack_info:
            record.stack_info = record.stack_info.replace(self.token, REDACTED)
        return True


def _check(token: str, info: InstanceInfo) -> None:
    """Ask the Hub who the token belongs to; raise `HuggingFaceLoginError` (redacted) if it fails."""
    error = ""
    try:
        from huggingface_hub import whoami

        whoami(token=token)
    except Exception as exc:  # noqa: BLE001 - any failure becomes one clear, token-free error
        error = f"{type(exc).__name__}: {exc}".replace(token, REDACTED)
    if error:  # raised outside the except block, so the original exception is not chained to it
        raise HuggingFaceLoginError(
            f"huggingface plugin: node {info.node} could not log in to the Hub with the given token "
            f"({error[:500]}). Check the token, or pass validate=False to skip the check."
        )


def huggingface(token: str | None = None, *, packages: Sequence[str] = PACKAGES,
                validate: bool = False, models: Sequence[str] = ()) -> HuggingFacePlugin:
    """transformers, datasets, tokenizers and huggingface_hub on every worker, logged in with `token`.

    `token` is a HuggingFace access token (None: the client's `$HF_TOKEN`, if any). It is exported
    as the secret `HF_TOKEN` and never appears in events, logs, reprs or error messages. `packages`
    replaces the pip requirements added; `validate=True` checks the token with the Hub when each
    worker starts (needs network access to the Hub). For multi-node training combine with
    `sky.plugins.torch()`: the `Trainer` picks up the process group it sets up.

    `models` (Skyward's spelling) are Hub repo ids downloaded on each node at setup (see `bootstrap`).

    Raises `ValueError` for an empty token or a malformed repo id.
    """
    return HuggingFacePlugin(token, packages=packages, validate=validate, models=models)
