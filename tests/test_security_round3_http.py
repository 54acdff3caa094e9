"""Red-team round 3 (issue 31), the openai backend's findings 6, 8, 10, 11, 12 and 15 (part), each replayed against a
`FakeChatServer` (or a small variant of it) and asserting the safe outcome."""
import os, json, gzip, zlib, hashlib
from pathlib import Path
import pytest
from silverspoon.core import GenerationParams, ModelParams, SilverspoonError
from silverspoon.engine.backends import GenRequest, user
from silverspoon.engine.backends.openai import OpenAIBackend, is_local_url, resolve_api_key
from silverspoon.engine.store import GenerationStore, generate_all
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


# --- 10. absurd token counts and compression bombs -------------------------------------------------------------------------

def _reply(content="Fine.", **usage):
    return {"id": "x", "object": "chat.completion", "model": "fake-model",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}], "usage": usage}


def test_an_absurd_token_count_is_not_stored_and_reruns_still_work(tmp_path):
    with FakeChatServer(script={"": _reply(prompt_tokens=-5, completion_tokens=10**30)}) as srv:
        be = OpenAIBackend(srv.model_params(max_retries=0))
        store = GenerationStore(tmp_path/"usage.jsonl")
        first = generate_all(be, _reqs(), GenerationParams(max_new_tokens=16), store, run="usage", progress=False)
    recs = [json.loads(l) for l in store.path.read_text().splitlines()]
    assert [(r["prompt_tokens"], r["completion_tokens"], r["answer"]) for r in recs] == [(None, None, "Fine.")] * 3
    again = generate_all(be, _reqs(), GenerationParams(max_new_tokens=16), GenerationStore(store.path), run="usage", progress=False)
    assert again["cached"].all() and list(again["answer"]) == ["Fine."] * 3 and again["completion_tokens"].isna().all()
    assert first["completion_tokens"].isna().all()


class CompressingServer(FakeChatServer):
    "Ignores `Accept-Encoding: identity` and sends `payload` encoded with `encoding`."
    def __init__(self, payload:bytes, encoding:str, **kw):
        super().__init__(**kw); self.payload, self.encoding, self.asked = payload, encoding, []
    def _handle(self, h):
        h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self._lock: self.asked.append(h.headers.get("Accept-Encoding"))
        body = {"gzip": gzip.compress, "deflate": zlib.compress, "br": lambda b: b"not really brotli"}[self.encoding](self.payload)
        try:
            h.send_response(200); h.send_header("Content-Type", "application/json"); h.send_header("Content-Encoding", self.encoding)
            h.send_header("Content-Length", str(len(body))); h.end_headers(); h.wfile.write(body)
        except OSError: pass


BOMB = json.dumps(_reply("@")).encode().replace(b"@", b"a" * (32 * 2**20))     # 32 MiB of JSON, 128 x the cap


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compression_bomb_is_capped_on_decoded_bytes(encoding):
    with CompressingServer(BOMB, encoding) as srv:
        wire = len({"gzip": gzip.compress, "deflate": zlib.compress}[encoding](BOMB))
        g, = OpenAIBackend(srv.model_params(max_retries=2)).generate(_reqs(1), GenerationParams(max_new_tokens=16))
        assert srv.asked == ["identity"]                                          # asked for no compression, and sent it anyway
    assert wire < 2**20                                                            # under a MiB on the wire ...
    assert g.text is None and g.error.startswith("ReplyTooLarge: ") and "passed the cap of 263,168 bytes" in g.error, g.error
    assert g.error.endswith("(after 1 attempt)")                                   # ... refused once decoded past the cap, not retried


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_small_compressed_reply_is_still_read(encoding):
    with CompressingServer(json.dumps(_reply("Fine.", completion_tokens=1)).encode(), encoding) as srv:
        g, = OpenAIBackend(srv.model_params()).generate(_reqs(1), GenerationParams(max_new_tokens=16))
    assert (g.text, g.completion_tokens, g.error) == ("Fine.", 1, None)


def test_an_encoding_that_is_not_decoded_here_is_refused():
    with CompressingServer(b"{}", "br") as srv:
        g, = OpenAIBackend(srv.model_params(max_retries=2)).generate(_reqs(1), GenerationParams(max_new_tokens=16))
    assert g.text is None and g.error.startswith("BadReply: ") and "is encoded br although silverspoon asked for an uncompressed one" in g.error
    assert "Fix: turn response compression off" in g.error and g.error.endswith("(after 1 attempt)")


# --- 15 (part). HTTP 400/404 fail fast with the server's own message; the store key includes model.revision ---------------

class RejectingServer(FakeChatServer):
    "Answers every chat request with HTTP `status` and `body` as is (plain text, FastAPI's `detail`, ...), except items in `answer`."
    def __init__(self, status:int, body:bytes, content_type:str="text/plain", answer=(), **kw):
        super().__init__(**kw); self.status, self.body, self.content_type, self.answer = status, body, content_type, tuple(answer)
    def _handle(self, h):
        item = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)))["messages"][-1]["content"]
        with self._lock: self.n_requests += 1; self.attempts[item] += 1
        if any(a in item for a in self.answer): return h.send_json(200, _reply(f"answer to {item}"))
        h.send_response(self.status); h.send_header("Content-Type", self.content_type); h.send_header("Content-Length", str(len(self.body)))
        h.end_headers(); h.wfile.write(self.body)


@pytest.mark.parametrize("status,body,content_type,says", [
    (400, b"Invalid request: unknown sampling parameter seed\n", "text/plain", "BadRequestError: HTTP 400: Invalid request: unknown sampling parameter seed"),
    (400, b'{"detail": "max_tokens must be at most 4096"}', "application/json", "BadRequestError: HTTP 400: max_tokens must be at most 4096"),
    (404, b'{"detail": "Model fake-model not found"}', "application/json", "NotFoundError: HTTP 404: Model fake-model not found"),
    (404, b"", "text/plain", "NotFoundError: HTTP 404: an empty reply")])
def test_a_rejecting_server_stops_the_run_with_its_own_message(tmp_path, status, body, content_type, says):
    with RejectingServer(status, body, content_type) as srv:
        be = OpenAIBackend(srv.model_params(concurrency=1, max_retries=3), backoff_s=0.01)
        store = GenerationStore(tmp_path/"rejected.jsonl")
        with pytest.raises(SilverspoonError) as e:
            generate_all(be, _reqs(12), GenerationParams(max_new_tokens=16), store, run="rejected", progress=False)
        sent = srv.n_requests
    assert says in str(e.value), str(e.value)                         # the server's own words, not "Error code: 400"
    assert "Every request would get the same, so nothing more was sent: check model.id 'fake-model'" in str(e.value)
    assert sent == (1 if status == 404 else 3), sent                  # not retried, not tried item by item: 1 (404) or 3 (400) requests
    assert not store.path.exists()                                    # nothing answered, nothing stored: the next run asks again


def test_a_400_after_answers_is_about_that_item_and_is_stored_with_the_message(tmp_path):
    with RejectingServer(400, b'{"object": "error", "message": "This model\'s maximum context length is 2048 tokens."}', "application/json",
                         answer=("scenario 0:", "scenario 1:")) as srv:
        be = OpenAIBackend(srv.model_params(concurrency=1, max_retries=3), backoff_s=0.01)
        reqs = _reqs(2) + [GenRequest(f"long-{i}", user(f"long {i}")) for i in range(4)]
        gens = be.generate(reqs, GenerationParams(max_new_tokens=16))
    assert [g.text for g in gens[:2]] == ["answer to scenario 0: who is wrong?", "answer to scenario 1: who is wrong?"]
    assert all(g.error == "BadRequestError: HTTP 400: This model's maximum context length is 2048 tokens. (after 1 attempt)" for g in gens[2:]), gens
    assert srv.n_requests == 6                                        # every item was asked once: none retried, none skipped


def test_a_changed_revision_does_not_reuse_stored_answers(tmp_path):
    with FakeChatServer() as srv:
        store = tmp_path/"rev.jsonl"
        runs = [generate_all(OpenAIBackend(srv.model_params(revision=rev)), _reqs(), GenerationParams(max_new_tokens=16),
                             GenerationStore(store), run="rev", progress=False) for rev in ("v1", "v2", "v1")]
    assert [r["cached"].tolist() for r in runs] == [[False] * 3, [False] * 3, [True] * 3]
    assert srv.n_requests == 6


# --- 11. a server that answers as another model is on the record -----------------------------------------------------------

def test_a_server_answering_as_another_model_is_recorded():
    other = _reply("Fine.") | {"model": "gpt-4o-mini"}
    with FakeChatServer(script={"scenario 1:": other}) as srv:                # asked for fake-model; one reply says another model
        be = OpenAIBackend(srv.model_params())
        gens = be.generate(_reqs(3), GenerationParams(max_new_tokens=16))
    assert all(g.text for g in gens)
    es = be.engine_stats()
    assert es["served_model_mismatch"] == "model.id is 'fake-model', but the server named 'gpt-4o-mini' in 1 of 3 replies", es
    assert sorted((m["model"], m["n"]) for m in es["served_models"]) == [("fake-model", 2), ("gpt-4o-mini", 1)]
    assert [s.split()[0] for s in es["server_software"]] == ["FakeChat/1.0"] and sum(es["server_software"].values()) == 3


def test_a_server_answering_as_the_model_asked_for_has_no_mismatch():
    with FakeChatServer() as srv:
        be = OpenAIBackend(srv.model_params())
        be.generate(_reqs(2), GenerationParams(max_new_tokens=16))
    es = be.engine_stats()
    assert "served_model_mismatch" not in es and es["served_models"] == [{"model": "fake-model", "system_fingerprint": "fp_fake", "n": 2}]
