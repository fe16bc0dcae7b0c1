"""`Pool(...)` refuses a bad argument at construction with a `TypeError`/`ValueError` naming it, and
creates nothing (no log, no state) — rather than an `AttributeError` when the pool opens, or a value
such as NaN that no comparison refuses and that silently turns a bound off."""

from __future__ import annotations

import math
import os
import re

import pytest

import skyhive as sky

NAN = math.nan

BAD = [
    # (arguments, exception, what the message must name)
    ({"image": 5}, TypeError, "image=5"),
    ({"image": sky.Image}, TypeError, "image="),
    ({"image": "python:3.11"}, TypeError, "image='python:3.11'"),
    ({"plugins": [5]}, TypeError, r"plugins\[0\]=5"),
    ({"plugins": [object()]}, TypeError, r"plugins\[0\]="),
    ({"plugins": "torch"}, TypeError, "plugins='torch'"),
    ({"plugins": None}, TypeError, "plugins=None"),
    ({"plugins": [sky.plugins.torch]}, TypeError, r"plugins\[0\]=.*call it: torch"),
    ({"plugins": [sky.plugins.Plugin]}, TypeError, r"plugins\[0\]=Plugin.*instance"),
    ({"heartbeat_timeout": NAN}, ValueError, "heartbeat_timeout=nan"),
    ({"heartbeat_interval": NAN}, ValueError, "heartbeat_interval=nan"),
    ({"heartbeat_interval": 0}, ValueError, "heartbeat_interval=0"),
    ({"heartbeat_timeout": "20"}, TypeError, "heartbeat_timeout='20'"),
    ({"heartbeat_timeout": 1.0, "heartbeat_interval": 2.0}, ValueError, "heartbeat_timeout=1.0"),
    ({"start_timeout": NAN}, ValueError, "start_timeout=nan"),
    ({"stop_timeout": -1}, ValueError, "stop_timeout=-1"),
    ({"cancel_grace": None}, TypeError, "cancel_grace=None"),
    ({"max_restarts": 1.5}, TypeError, "max_restarts=1.5"),
    ({"max_restarts": True}, TypeError, "max_restarts=True"),
    ({"cache_bytes": NAN}, TypeError, "cache_bytes=nan"),
    ({"name": 5}, TypeError, "name=5"),
    ({"name": "../escape"}, ValueError, "name='../escape'"),
    ({"name": "a/b"}, ValueError, "name='a/b'"),
    ({"name": ""}, ValueError, "name=''"),
    ({"log_events": "no"}, TypeError, "log_events='no'"),
    ({"progress": "yes"}, TypeError, "progress='yes'"),
    ({"keep": "yes", "name": "kept"}, TypeError, "keep='yes'"),
    ({"keep": True, "name": "kept", "autostop": "5"}, TypeError, "autostop='5'"),
    ({"keep": True, "name": "kept", "autostop": NAN}, ValueError, "autostop=nan"),
    ({"keep": True, "name": "kept", "autostop": math.inf}, ValueError, "autostop=inf"),
    ({"processes_per_node": True}, TypeError, "processes_per_node=True"),
]


@pytest.mark.parametrize(("kwargs", "error", "names"), BAD, ids=[re.sub(r" at 0x[0-9a-f]+", "", repr(b[0])) for b in BAD])
def test_a_bad_argument_is_refused_at_construction_naming_it(kwargs, error, names, skyhive_home):
    with pytest.raises(error, match=rf"Pool\({names}"):
        sky.Pool(provider=sky.Local(), **kwargs)
    assert os.listdir(skyhive_home) == []  # nothing created


def test_settings_refuse_nan_themselves():
    from skyhive.runtime.common.settings import Settings

    with pytest.raises(ValueError, match=r"Settings\(heartbeat_timeout=nan\)"):
        Settings(heartbeat_timeout=NAN)


def test_good_arguments_are_still_taken(skyhive_home):
    pool = sky.Pool(provider=sky.Local(), nodes=2, plugins=(p for p in [sky.plugins.joblib()]),
                    image=sky.Image(env={"A": "1"}), name="good-1.x_y", log_events=False, progress=None,
                    start_timeout=math.inf, heartbeat_interval=0.5, heartbeat_timeout=1, max_restarts=0,
                    cache_bytes=0)
    assert len(pool.plugins) == 1 and pool.settings.heartbeat_timeout == 1
    assert pool.settings.start_timeout == math.inf
    assert os.listdir(skyhive_home) == []
