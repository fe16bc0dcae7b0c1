"""The huggingface plugin: the libraries and the login, and a token that appears nowhere.

"Nowhere" is checked by grepping, after real pools ran tasks that print, log and raise the token, and
a login that the Hub rejects: every event log (the JSONL files under $SKYHIVE_HOME/pools/), every log
record (caplog), and the text of every exception the caller sees. The Hub cannot be reached from
here: the rejecting Hub is a local HTTP server (`FakeHub`) that answers 403 and echoes the token it
was sent, which `huggingface_hub` then puts in its exception's message.
"""

from __future__ import annotations

import http.server
import logging
import os
import pickle
import sys
import threading
import traceback
from pathlib import Path

import cloudpickle
import pytest

import skyhive as sky
from skyhive.plugins.huggingface import PACKAGES, HuggingFaceLoginError, HuggingFacePlugin

pytest.importorskip("huggingface_hub")

TOKEN = "hf_TESTtokenDoNotLeak0123456789abcdef"


def exception_texts(exc: BaseException) -> str:
    """Every text an exception shows: str, repr, notes, chained causes, remote traceback, attributes."""
    parts = ["".join(traceback.format_exception(exc)), repr(exc), repr(getattr(exc, "args", ()))]
    parts += [str(v) for v in vars(exc).values()] if hasattr(exc, "__dict__") else []
    return "\n".join(parts)


# -- client side, pure ------------------------------------------------------------------------


def test_token_is_a_secret_of_the_image_and_never_in_the_plugin_pickle_or_repr(monkeypatch):
    plugin = sky.plugins.huggingface(token=TOKEN)
    image = plugin.transform(sky.Image(pip=["numpy"]), None)
    assert image.pip == ("numpy", *PACKAGES)
    assert dict(image.secrets) == {"HF_TOKEN": TOKEN} and "HF_TOKEN" not in dict(image.env)  # read through, not listed
    assert TOKEN.encode() not in cloudpickle.dumps(plugin)  # travels only as the secret env var
    assert pickle.loads(cloudpickle.dumps(plugin)).expects_token
    for text in (repr(plugin), str(plugin), repr(image), image.canonical_json()):
        assert TOKEN not in text
    # None takes the client's $HF_TOKEN; no token at all adds the libraries only
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert dict(sky.plugins.huggingface().transform(sky.Image(), None).secrets) == {"HF_TOKEN": TOKEN}
    monkeypatch.delenv("HF_TOKEN")
    assert dict(sky.plugins.huggingface().transform(sky.Image(), None).secrets) == {}
    with pytest.raises(ValueError):
        sky.plugins.huggingface(token="")


def test_a_worker_without_the_token_says_so(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    plugin = pickle.loads(cloudpickle.dumps(HuggingFacePlugin(TOKEN)))
    info = sky.InstanceInfo(node=0, total_nodes=1, head_addr="127.0.0.1", head_port=1, pool_id="p")
    with pytest.raises(HuggingFaceLoginError, match=r"\$HF_TOKEN is not set on node 0"):
        with plugin.around_app(info):
            pass


# -- real pools ---------------------------------------------------------------------------------


class FakeHub(http.server.BaseHTTPRequestHandler):
    """Stands in for huggingface.co (unreachable here): refuses every token, echoing it back."""

    def do_GET(self):  # noqa: N802
        body = f'{{"error": "Invalid credentials in Authorization header: {self.headers.get("authorization")}"}}'
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_rejected_login_says_why_without_the_token(fake_hub, monkeypatch):
    import huggingface_hub.hf_api as hf_api

    from skyhive.plugins.huggingface import _check

    monkeypatch.setattr(hf_api.api, "endpoint", fake_hub)  # this process imported the hub already
    info = sky.InstanceInfo(node=1, total_nodes=2, head_addr="127.0.0.1", head_port=1, pool_id="p")
    with pytest.raises(HuggingFaceLoginError, match="node 1 could not log in") as caught:
        _check(TOKEN, info)
    assert "403 Forbidden" in str(caught.value) and "Bearer ***" in str(caught.value)
    assert caught.value.__context__ is None and TOKEN not in exception_texts(caught.value)


def logged_in():
    from huggingface_hub import get_token

    return get_token() == os.environ["HF_TOKEN"] == os.environ["HUGGING_FACE_HUB_TOKEN"]


def leak_everywhere():
    token = os.environ["HF_TOKEN"]
    print(f"stdout: {token}")
    print(f"stderr: {token}", file=sys.stderr)
    logging.getLogger("user").error("logged: %s", token)
    os.write(1, f"fd 1: {token}\n".encode())
    raise ValueError(f"bad token {token}")


class TokenError(Exception):
    def __init__(self, message, token):
        super().__init__(message)
        self.token = token  # the secret only in an attribute, not in the message


def raise_with_hidden_token():
    raise TokenError("no secret in this message", os.environ["HF_TOKEN"])


@pytest.mark.anyio
async def test_the_token_appears_in_no_event_log_log_record_or_exception(caplog, skyhive_home, fake_hub):
    caplog.set_level(logging.DEBUG)
    errors: list[BaseException] = []
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.huggingface(token=TOKEN)]) as pool:
        assert await pool.broadcast(logged_in) == [True, True]
        # an exception that holds the token comes back as a redacted RemoteError
        with pytest.raises(sky.RemoteError, match=r"ValueError: bad token \*\*\*") as caught:
            await pool.run(leak_everywhere)
        errors.append(caught.value)
        with pytest.raises(sky.RemoteError) as caught:
            await pool.run(raise_with_hidden_token)
        assert caught.value.type_name.endswith("TokenError")
        errors.append(caught.value)
    # with validate=True the Hub (here: a fake that rejects the token) is asked at worker start
    image = sky.Image(env={"HF_ENDPOINT": fake_hub})
    with pytest.raises(sky.ProvisionError, match="could not log in to the Hub") as caught:
        async with sky.Pool(provider=sky.Local(), nodes=1, image=image,
                            plugins=[sky.plugins.huggingface(token=TOKEN, validate=True)]):
            pass
    errors.append(caught.value)
    assert "403 Forbidden" in str(caught.value) and "Bearer ***" in str(caught.value)  # echoed, redacted

    logs = list(Path(skyhive_home, "pools").glob("*.jsonl"))
    assert len(logs) == 2
    text = "\n".join(p.read_text() for p in logs)
    assert "stdout: ***" in text and "fd 1: ***" in text and "stderr: ***" in text  # they did run
    assert TOKEN not in text
    assert "logged: ***" in caplog.text and TOKEN not in caplog.text
    for exc in errors:
        assert TOKEN not in exception_texts(exc)
