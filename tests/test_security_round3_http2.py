"""Red-team round 3 (issue 31), the openai backend's and the data downloads' remaining findings: plain http:// to another machine,
redirect loops, one credential-scrubbing helper, credentialed mirrors, TeX in model ids, stop_scale ids of non-ASCII names and an
outside store never published. Each test replays the finding and asserts the safe outcome."""
import os, json, base64, hashlib, warnings, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from pathlib import Path
import pytest
from silverspoon.core import GenerationParams, ModelParams, SilverspoonError
from silverspoon.backends import GenRequest, user
from silverspoon.backends.openai import OpenAIBackend, UnencryptedKeyWarning
from silverspoon.testing import FakeChatServer

SECRET = "sk-test-" + hashlib.sha256(b"silverspoon issue 31 round 4").hexdigest()[:24]
KEY_VAR = "SILVERSPOON_R4_API_KEY"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, SECRET); return SECRET


def _reqs(n=3): return [GenRequest(item_id=f"r4-{i}", messages=user(f"scenario {i}: who is wrong?")) for i in range(n)]


# --- plain http:// to a remote host: warned, and on the record ------------------------------------------------------------

def test_plain_http_to_a_remote_host_warns_and_is_recorded(key):
    m = ModelParams(backend="openai", id="m", base_url="http://gpu-node-7.cluster.example:8000/v1", api_key_env=KEY_VAR)
    with pytest.warns(UnencryptedKeyWarning) as seen: be = OpenAIBackend(m)
    msg = str(seen[0].message)
    assert "plain http:// to gpu-node-7.cluster.example" in msg and "unencrypted" in msg and f"`{KEY_VAR}`" in msg
    assert "Fix: use https://" in msg and "ssh -L" in msg and key not in msg
    assert "gpu-node-7.cluster.example" in be.engine_stats()["unencrypted_transport"]     # in the run's provenance too


@pytest.mark.parametrize("url", ["https://gpu-node-7.cluster.example/v1", "http://localhost:8000/v1", "http://127.0.0.1:8000/v1", None])
def test_https_and_this_machine_are_not_warned_about(key, url):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnencryptedKeyWarning)
        be = OpenAIBackend(ModelParams(backend="openai", id="m", base_url=url, api_key_env=KEY_VAR))
    assert "unencrypted_transport" not in be.engine_stats()


# --- a redirect loop says so, with the host and the fix ------------------------------------------------------------------

def test_a_redirect_loop_is_reported_as_too_many_redirects(key):
    with FakeChatServer(api_key=key) as srv:
        srv.script = {"": f"redirect:{srv.base_url}/chat/completions"}              # every request redirected to itself
        be = OpenAIBackend(srv.model_params(api_key_env=KEY_VAR, concurrency=1, max_retries=3))
        with pytest.raises(SilverspoonError) as e: be.generate(_reqs(3), GenerationParams(max_new_tokens=8))
        n = srv.n_requests
    msg = str(e.value)
    assert "too many redirects: the server at http://127.0.0.1:" in msg and "(host 127.0.0.1)" in msg, msg
    assert "Fix: set base_url to the address the server answers at itself" in msg and "Nothing more was sent." in msg
    assert "Connection error." not in msg and key not in msg
    assert n == 21                                  # one item, one attempt (20 redirects): not retried, the others never sent
