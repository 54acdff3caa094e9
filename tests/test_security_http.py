"""Attacks through HTTP: the openai backend and `silverspoon run` against hostile or broken servers (red-team rounds 2 and 3,
issues 19 and 31): key variables and keys never echoed or stored, deadlines that count queued time, redirects, compression
bombs, absurd token counts, partial failure, a server answering as another model. Each attack ends in one clear error
(exit != 0, nothing lost) or a safe outcome. (Backend-level retries and stalls: tests/test_api.py.)"""
import re, json, hashlib, gzip, zlib, warnings, threading
from pathlib import Path
import pytest
import yaml
from conftest import ROOT
from silverspoon.testing import FakeChatServer
from silverspoon.core import GenerationParams, ModelParams, SilverspoonError
from silverspoon.engine.backends import GenRequest, user
from silverspoon.engine.backends.openai import OpenAIBackend, is_local_url, resolve_api_key, UnencryptedKeyWarning
from silverspoon.engine.store import GenerationStore, generate_all


# ----------------------------------------------------------------------------------------------------
# Through the `silverspoon` command: key variables, deadlines, files never echoed, terminal escapes, a refused key, partial failure (was tests/test_security_keys_http.py)
SECRET = "sk-test-" + hashlib.sha256(b"silverspoon issue 19").hexdigest()[:24]


def _one_clear_error(r, *needles, rc=2):
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


def _write(path:Path, params:dict)->Path:
    path.write_text(yaml.safe_dump(params)); return path


# --- 1. a key variable must be one meant for an API key ----------------------------------------------------------------

@pytest.mark.parametrize("where", ["model", "judge"])
@pytest.mark.parametrize("var", ["HOME", "PATH", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"])
def test_api_key_env_naming_any_variable_is_refused(tmp_path, cli, where, var):
    m = {"backend": "openai", "id": "m", "base_url": "https://collector.example.com/v1", "api_key_env": var}
    p = {"study": "normative", "model": m} if where == "model" else \
        {"study": "normative", "model": {"backend": "replay", "id": "GPT4"}, "task": {"judge": m}}
    f = _write(tmp_path/"exfil.yaml", p)
    field = "model.api_key_env" if where == "model" else "task.judge.api_key_env"
    for args in (["check", f], ["run", f, "--reports-dir", tmp_path/"reports"]):
        _one_clear_error(cli(*args, env={"SILVERSPOON_STORE": str(tmp_path/"store")}), str(f), f"field `{field}` = `{var}` does not name an API key variable")
    assert not (tmp_path/"reports").exists() and not (tmp_path/"store").exists()
    # the person who runs it may allow a name explicitly, on their machine
    r = cli("check", f, env={"SILVERSPOON_KEY_VARS": f"OTHER,{var}"})
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_a_name_shaped_token_in_api_key_env_is_not_echoed(tmp_path, cli):
    token = "ghp_" + hashlib.sha256(b"gh").hexdigest()[:36]          # a GitHub token is shaped like a variable name
    f = _write(tmp_path/"k.yaml", {"study": "normative", "model": {"backend": "openai", "id": "m", "api_key_env": token}})
    r = cli("check", f)
    _one_clear_error(r, "field `model.api_key_env` = (not shown: it may be a key) does not name an API key variable")
    assert token not in r.stdout + r.stderr and token[4:] not in r.stdout + r.stderr


# --- 4. local files are named, never quoted -----------------------------------------------------------------------------

@pytest.mark.parametrize("content", [f"{SECRET}: x\n", f"aws_secret_access_key = {SECRET}\n[default]\n", f"password: {SECRET}: x\n",
                                     f"machine api.example.com\n  login me\n  password {SECRET}\n"])
def test_include_of_a_non_params_file_never_echoes_it(tmp_path, cli, content):
    (tmp_path/"credentials").write_text(content)
    f = tmp_path/"run.yaml"; f.write_text("include: credentials\nstudy: normative\nmodel: {backend: replay, id: GPT4}\n")
    r = cli("check", f)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(tmp_path/"credentials") in r.stderr, r.stderr
    assert SECRET not in r.stdout + r.stderr and "aws_secret" not in r.stderr and "password" not in r.stderr, r.stderr


def test_human_file_that_is_not_a_csv_is_not_echoed(tmp_path, cli):
    "A STOP run whose task.human_file names a key file: FAIL names the file and the missing columns, in the CLI and on the failure page."
    secret_file = tmp_path/"id_key"
    secret_file.write_text(f"-----BEGIN PRIVATE KEY {SECRET}-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n")
    f = _write(tmp_path/"stop-human.yaml", {"include": str(ROOT/"params"/"stop"/"_base-replay.yaml"),
                                            "model": {"id": "gpt4"}, "sample": {"n": 20, "stratify_by": "severity", "seed": 0},
                                            "task": {"n_boot": 20, "human_file": str(secret_file)}})
    r = cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})   # in this process; the kernel is its own
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{secret_file}: not a human annotation CSV: it lacks the columns" in r.stderr, r.stderr
    failed = (tmp_path/"reports"/"stop"/"stop-human.failed.html").read_text()
    assert "not a human annotation CSV" in failed
    for text in (r.stdout + r.stderr, failed, (tmp_path/"reports"/"stop"/"stop-human.failed.ipynb").read_text()):
        assert SECRET not in text and "BEGIN PRIVATE" not in text and "MIIEvQ" not in text


# --- 7. terminal escape sequences ----------------------------------------------------------------------------------------

def test_control_characters_are_never_printed_raw(tmp_path, cli):
    esc = "\x1b]0;pwned\x07\x1b[2J\rok   \u202e"
    f = _write(tmp_path/"esc.yaml", {"study": "normative", "description": esc, "model": {"backend": "hf", "id": f"org/model{esc}"}})
    r = cli("check", f)
    assert r.returncode == 0 and r.stdout.count("\n") == 1, r.stdout
    assert r"org/model\x1b]0;pwned\x07\x1b[2J\x0dok   \u202e" in r.stdout, r.stdout
    bad = _write(tmp_path/"esc-bad.yaml", {"study": "normative", "model": {"backend": "replay", "id": "GPT4", esc: 1}, "description": esc})
    r = cli("check", bad)
    _one_clear_error(r, r"unknown field `model.\x1b]0;pwned")
    for out in (r.stdout, r.stderr): assert not re.search("[\x00-\x09\x0b-\x1f\x7f\u202e]", out), repr(out)


# --- 10. a refused key fails fast with the cause ---------------------------------------------------------------------------

def test_wrong_key_stops_the_run_with_check_the_key(tmp_path, cli):
    with FakeChatServer(api_key="sk-the-right-key-0123456789") as srv:
        m = {"backend": "openai", "id": "fake-model", "base_url": srv.base_url, "api_key_env": "SILVERSPOON_TEST_API_KEY",
             "concurrency": 2, "batch_size": 4, "max_retries": 2, "timeout_s": 5.0}
        f = _write(tmp_path/"wrong-key.yaml", {"study": "normative", "model": m, "sample": {"n": 12, "stratify_by": "topic", "seed": 1},
                                               "task": {"n_boot": 20}})
        r = cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index",
                env={"SILVERSPOON_TEST_API_KEY": SECRET, "SILVERSPOON_STORE": str(tmp_path/"store")})   # in this process; the kernel is its own
        n_requests = srv.stats()["requests"]
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stderr and f"the server at {srv.base_url} refused the request with HTTP 401" in r.stderr, r.stderr
    assert "check the key in the environment variable `SILVERSPOON_TEST_API_KEY`" in r.stderr and "could be labelled" not in r.stderr, r.stderr
    assert n_requests <= 2, n_requests                       # the first batch stopped; no retries, no further batches
    assert SECRET not in r.stdout + r.stderr
    assert not (tmp_path/"reports"/"normative"/"wrong-key.html").exists()


# --- 12. partial failure is visible in the summary and the exit status -------------------------------------------------------

def test_judge_partly_failing_is_incomplete_not_ok(tmp_path, cli):
    with FakeChatServer(fail_every=2, codes=(500,)) as srv:      # every second judge call fails
        judge = {"backend": "openai", "id": "judge", "base_url": srv.base_url, "max_retries": 0, "timeout_s": 5.0, "concurrency": 2}
        f = _write(tmp_path/"half-judged.yaml", {"study": "normative", "model": {"backend": "replay", "id": "GPT4"},
                                                 "sample": {"n": 20, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 20, "judge": judge}})
        r = cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})   # in this process; the kernel is its own
    assert r.returncode == 3, r.stdout + r.stderr
    counts = json.loads(json.dumps(__import__("pandas").read_csv(tmp_path/"reports"/"normative"/"half-judged"/"judge_counts.csv").iloc[0].to_dict()))
    assert 0 < counts["failed"] < counts["requests"], counts
    line = next(l for l in r.stdout.splitlines() if l.startswith("INCOMPLETE"))
    assert f"{counts['failed']} of {counts['requests']} calls failed in judge_counts" in line and "a rerun retries them" in line, r.stdout
    assert not any(l.startswith("ok ") for l in r.stdout.splitlines()), r.stdout
    assert "1 of 1 runs succeeded" in r.stdout and "1 of them incomplete" in r.stdout, r.stdout
    assert (tmp_path/"reports"/"normative"/"half-judged.html").exists()          # published: nothing is lost


# ----------------------------------------------------------------------------------------------------
# The openai backend against a FakeChatServer: keys echoed back, local hosts, mirror credentials, token counts, compression, rejecting servers, revisions, served model (was tests/test_security_round3_http.py)
KEY_VAR = "SILVERSPOON_TEST_HTTP_API_KEY"   # the key variable the backend-level attacks set (`key`)


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, SECRET); return SECRET


def _reqs(n=3): return [GenRequest(item_id=f"q{i}", messages=user(f"scenario {i}: who is wrong?")) for i in range(n)]


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


# --- issue 51 B16: a proxy that echoes the Authorization header cut short stores no fragment of the key -----------------

class TruncatingEchoServer(FakeChatServer):
    "A proxy that echoes the first 16 characters of the key it got (and, in the finish reason, a piece from its middle)."
    def _handle(self, h):
        tok = h.headers.get("Authorization", "").removeprefix("Bearer ")
        self.script = {"": {"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": f"stop {tok[10:22]}",
                            "message": {"role": "assistant", "content": f"auth: {tok[:16]}... (truncated)"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}}
        return super()._handle(h)


def test_a_truncated_echo_of_the_key_never_reaches_the_store(tmp_path, key):
    with TruncatingEchoServer() as srv:
        be = OpenAIBackend(srv.model_params(api_key_env=KEY_VAR, max_retries=0))
        store = GenerationStore(tmp_path/"store"/"normative"/"echo.jsonl")
        df = generate_all(be, _reqs(), GenerationParams(max_new_tokens=16), store, run="echo", progress=False)
    text = store.path.read_text()
    for a in range(len(key) - 8 + 1): assert key[a:a + 8] not in text, (a, text)   # no 8 characters of the key in a row
    assert list(df["answer"]) == ["auth: ***... (truncated)"] * 3


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


# ----------------------------------------------------------------------------------------------------
# Plain http:// to another machine, redirect loops (was tests/test_security_round3_http2.py, lines 13-59)


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


# ----------------------------------------------------------------------------------------------------
# timeout_s counts time queued at the server (was tests/test_security_round3_http2.py, lines 152-178)
# --- timeout_s counts time queued at the server: documented, and how to set concurrency -----------------------------------

class OneAtATime(FakeChatServer):
    "Generates one request at a time, like `transformers serve`: the others wait in its queue."
    def __init__(self, **kw): super().__init__(**kw); self._one = threading.Lock()
    def _handle(self, h):
        with self._one: return super()._handle(h)


def test_timeout_s_counts_time_queued_at_a_one_at_a_time_server():
    gen = GenerationParams(max_new_tokens=8)
    # each reply takes 0.4 s; the sixth of six in flight waits 2.0 s first, so it cannot finish within 2 s however fast the
    # machine; one at a time, every reply has 1.6 s to spare (a slow, shared CI machine only makes the queued side slower)
    with OneAtATime(delay=0.4) as srv:
        queued = OpenAIBackend(srv.model_params(concurrency=6, timeout_s=2.0, max_retries=0)).generate(_reqs(6), gen)
        one = OpenAIBackend(srv.model_params(concurrency=1, timeout_s=2.0, max_retries=0)).generate(_reqs(6), gen)
    failed = [g.error for g in queued if g.text is None]
    assert failed and all("model.timeout_s = 2 s bounds each attempt as a whole" in e for e in failed), failed
    assert all(g.text is not None for g in one)          # concurrency 1: nothing queues, every reply within timeout_s
    nb = json.loads((ROOT/"nbs"/"02c_openai.ipynb").read_text(encoding="utf-8"))
    prose = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown").replace("\n", " ")
    assert "the time the request waits in the server's queue" in prose and "**`concurrency: 1`**" in prose
    assert "**`timeout_s >= concurrency x (slowest reply)`**" in prose


# --- issue 51 A52: 100,000 reply headers are said as such, not as "Connection error." ----------------------------------

def test_a_reply_with_100000_headers_is_named_not_a_connection_error(key):
    import socket
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4); srv.settimeout(30); port = srv.getsockname()[1]
    served = []
    def serve():   # bounded: answers at most 4 connections, each with ~1.1 MB of headers, then stops
        for _ in range(4):
            try: c, _ = srv.accept()
            except OSError: return
            with c:
                c.settimeout(10)
                try: c.recv(65536); served.append(1); c.sendall(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(100_000)) + b"Content-Length: 2\r\n\r\n{}")
                except OSError: pass
    t = threading.Thread(target=serve, daemon=True); t.start()
    try:
        be = OpenAIBackend(ModelParams(backend="openai", id="m", base_url=f"http://u:{key}@127.0.0.1:{port}/v1", api_key_env=KEY_VAR, max_retries=2, timeout_s=20))
        with pytest.raises(SilverspoonError) as e: be.generate(_reqs(1), GenerationParams(max_new_tokens=8))
    finally: srv.close()
    msg = str(e.value)
    assert "too many reply headers" in msg and f"host 127.0.0.1" in msg and "header limit" in msg and "Connection error" not in msg, msg
    assert key not in msg and "u:" not in msg and len(served) == 1      # the URL login is not shown; not retried: every request would get the same
