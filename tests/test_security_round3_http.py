"""Red-team round 3 (issue 31), the openai backend's findings 6, 8, 10, 11, 12 and 15 (part), each replayed against a
`FakeChatServer` (or a small variant of it) and asserting the safe outcome."""
import os, json, gzip, zlib, hashlib
from pathlib import Path
import pytest
from silverspoon.core import GenerationParams, ModelParams, SilverspoonError
from silverspoon.backends import GenRequest, user
from silverspoon.backends.openai import OpenAIBackend, is_local_url, resolve_api_key
from silverspoon.store import GenerationStore, generate_all
from silverspoon.testing import FakeChatServer

SECRET = "sk-test-" + hashlib.sha256(b"silverspoon issue 31").hexdigest()[:24]
KEY_VAR = "SILVERSPOON_R3_API_KEY"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, SECRET); return SECRET


def _reqs(n=3): return [GenRequest(item_id=f"r3-{i}", messages=user(f"scenario {i}: who is wrong?")) for i in range(n)]


# --- 6. a server that echoes the Authorization header must not put the key into the store -------------------------------

class EchoingServer(FakeChatServer):
    "Answers HTTP 200 with the Authorization header it got in the answer, the model name, the fingerprint and the finish reason."
    def _handle(self, h):
        auth = h.headers.get("Authorization", "")
        self.script = {"": {"id": "x", "object": "chat.completion", "model": f"echo {auth}", "system_fingerprint": auth,
                            "choices": [{"index": 0, "finish_reason": f"stop {auth}",
                                         "message": {"role": "assistant", "content": f"You sent me: Authorization: {auth}"}}],
                            "usage": {"prompt_tokens": 3, "completion_tokens": 5}}}
        return super()._handle(h)


def test_a_key_echoed_in_the_reply_never_reaches_the_store(tmp_path, key):
    with EchoingServer() as srv:
        be = OpenAIBackend(srv.model_params(api_key_env=KEY_VAR, max_retries=0))
        store = GenerationStore(tmp_path/"store"/"normative"/"echo.jsonl")
        df = generate_all(be, _reqs(), GenerationParams(max_new_tokens=16), store, run="echo", progress=False)
        seen = [b["messages"] for b in srv.bodies]
    assert len(seen) == 3                                                      # the server did get (and echo) the key
    text = store.path.read_text()
    assert key not in text and key[8:] not in text, text                       # nowhere in the store: answer, finish reason, anything
    assert list(df["answer"]) == ["You sent me: Authorization: Bearer ***"] * 3   # the answer is kept, the key is not
    assert key not in json.dumps(be.served_models()) and key not in json.dumps(be.engine_stats(), default=str)


# --- 8. only this machine is local: names that look local are not -------------------------------------------------------

LOOKALIKES = ["127.0.0.1.attacker.example", "127.x.example", "127.0.0.1.nip.io", "app.10.0.0.1.nip.io", "evil.localhost"]


@pytest.mark.parametrize("host", LOOKALIKES)
def test_a_host_that_only_looks_local_is_remote(monkeypatch, host):
    url = f"http://{host}:8000/v1"
    assert not is_local_url(url)
    m = ModelParams(backend="openai", id="m", base_url=url, api_key_env=KEY_VAR)
    monkeypatch.setenv(KEY_VAR, "abc")                 # a placeholder: sent only to this machine, and too short to scrub
    with pytest.raises(SilverspoonError, match=f"`{KEY_VAR}` holds 3 characters, too few for an API key"): resolve_api_key(m)
    monkeypatch.delenv(KEY_VAR)                        # no key: the dummy "EMPTY" only for this machine
    with pytest.raises(SilverspoonError, match=f"`{KEY_VAR}` is not set"): resolve_api_key(m)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.3.2.1", "[::1]", "0.0.0.0"])
def test_this_machine_is_still_local(monkeypatch, host):
    url = f"http://{host}:8000/v1"
    assert is_local_url(url)
    monkeypatch.setenv(KEY_VAR, "abc")
    assert resolve_api_key(ModelParams(backend="openai", id="m", base_url=url, api_key_env=KEY_VAR)) == "abc"


# --- 12. credentials in SILVERSPOON_MIRROR are never printed ---------------------------------------------------------------

def test_mirror_credentials_are_not_printed(tmp_path, cli, root, monkeypatch):
    import socket
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]     # a port nothing listens on
    user, password = "mirror-reader", "hunter2-" + hashlib.sha256(b"mirror").hexdigest()[:12]
    monkeypatch.delenv("SILVERSPOON_DATA", raising=False)
    monkeypatch.setenv("SILVERSPOON_CACHE", str(tmp_path/"cache"))
    monkeypatch.setenv("SILVERSPOON_STORE", str(tmp_path/"store"))
    monkeypatch.setenv("SILVERSPOON_MIRROR", f"http://{user}:{password}@127.0.0.1:{port}/gh")
    r = cli("run", root/"params"/"normative"/"gpt4-replay.yaml", "--reports-dir", tmp_path/"reports")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "data files cannot be used" in r.stderr and "SILVERSPOON_MIRROR" in r.stderr     # the download did fail, and says where from
    assert "http://***@127.0.0.1" in r.stderr, r.stderr
    out = r.stdout + r.stderr
    assert password not in out and user not in out, out
    assert not (tmp_path/"reports").exists()
