"OpenAIBackend against the in-process FakeChatServer: retries, stalls, bounded concurrency, order, no key leaks."
import os, pickle, time, logging, secrets
from collections import Counter
import pytest

from silverspoon.core import SilverspoonError, GenerationParams
from silverspoon.engine.backends import GenRequest
from silverspoon.engine.backends.openai import OpenAIBackend, resolve_api_key
from silverspoon.testing import FakeChatServer, fake_reply

def _prompt(i): return f"item {i:02d}: who is wrong?"
def _reqs(n): return [GenRequest(item_id=f"it-{i:02d}", messages=[{"role": "user", "content": _prompt(i)}]) for i in range(n)]

# per-item plans: a list = actions of the 1st, 2nd, ... attempt (then answered); a single action = every attempt
TRANSIENT = {2: [429, 429], 5: [500], 8: [503, 429, 500], 11: [429], 14: ["stall"], 17: [500, "stall"], 23: ["stall", 429]}
ALWAYS = {26: 500, 29: 429}

def test_retries_stalls_concurrency_and_order():
    n, max_retries = 30, 4
    script = {_prompt(i): plan for i, plan in {**TRANSIENT, **ALWAYS}.items()}
    t0 = time.perf_counter()
    # fail_every adds server-wide 429/500s on top (hitting whichever unscripted item arrives 7th, 14th, ...)
    with FakeChatServer(script=script, fail_every=7, codes=(429, 500), stall_seconds=4.0, delay=0.01) as srv:
        be = OpenAIBackend(srv.model_params(concurrency=3, timeout_s=1.0, max_retries=max_retries), backoff_s=0.05, max_backoff_s=0.2)
        gens = be.generate(_reqs(n), GenerationParams(max_new_tokens=32))
        st, log = srv.stats(), list(srv.log)
    elapsed = time.perf_counter() - t0   # printed below, never asserted: speed belongs in benchmarks (CI machines are shared)

    # one Generation per request, in request order
    assert len(gens) == n
    for i, g in enumerate(gens):
        if i in ALWAYS:   # permanent failure: recorded, not raised
            assert g.text is None and g.finish_reason == "error", g
            cls = "InternalServerError" if ALWAYS[i] == 500 else "RateLimitError"
            assert g.error.startswith(f"{cls}: ") and f"after {max_retries + 1} attempts" in g.error, g.error
            assert st["attempts"][_prompt(i)] == max_retries + 1
        else:             # answered, with this item's own answer (so order is preserved)
            assert g.error is None and g.finish_reason == "stop", g
            assert g.text == fake_reply(_prompt(i))
            assert g.prompt_tokens == 5 and g.completion_tokens == len(g.text.split()) and g.seconds > 0
    # transient failures were retried exactly as often as scripted, then succeeded
    for i, plan in TRANSIENT.items(): assert st["attempts"][_prompt(i)] == len(plan) + 1, (i, st["attempts"])
    # every item was answered by the server at most once (nothing generated twice), failed items never
    answered = Counter(e["item"] for e in log if e.get("outcome") == "answered")
    assert answered == Counter({_prompt(i): 1 for i in range(n) if i not in ALWAYS}), answered
    # stalled requests were cut by the client timeout (the server saw the hang-up)
    assert sum(e.get("outcome") == "client gone" for e in log) == 3
    # bounded concurrency, and it was actually used
    assert 2 <= st["max_in_flight"] <= 3, st
    # unscripted items hit by fail_every were retried until answered: attempts = 1 + errors they got
    scripted = set(script)
    hits = Counter(e["item"] for e in log if e["item"] not in scripted and isinstance(e["action"], int))
    for i in range(n):
        if _prompt(i) not in scripted: assert st["attempts"][_prompt(i)] == 1 + hits[_prompt(i)], (i, hits)
    print(f"{n} items, {st['requests']} requests ({sum(hits.values())} fail_every errors), max in flight {st['max_in_flight']}, {elapsed:.2f}s")

def test_non_retryable_fails_at_once():
    with FakeChatServer(script={"bad": 400}) as srv:
        be = OpenAIBackend(srv.model_params(max_retries=4), backoff_s=0.01)
        g, ok = be.generate([GenRequest("b", [{"role": "user", "content": "bad"}]), GenRequest("o", [{"role": "user", "content": "ok"}])],
                            GenerationParams())
        assert srv.stats()["attempts"] == {"bad": 1, "ok": 1}
    assert g.text is None and g.error.startswith("BadRequestError: ") and "after 1 attempt)" in g.error
    assert ok.text == fake_reply("ok")

def test_connection_refused_fails_fast_with_the_cause():
    "Issue 19, finding 10: a refused connection stops the batch with 'unreachable', not a report where nothing could be labelled."
    with FakeChatServer() as srv: mp = srv.model_params(max_retries=1, timeout_s=1, concurrency=2)
    be = OpenAIBackend(mp, backoff_s=0.01)   # the server is closed now
    with pytest.raises(SilverspoonError, match=rf"the server at {srv.base_url} is unreachable .*check base_url and that the server is running"):
        be.generate(_reqs(6), GenerationParams())

def test_api_key_never_leaks(monkeypatch, caplog):
    key = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv("SILVERSPOON_TEST_API_KEY", key)
    caplog.set_level(logging.DEBUG)   # the SDK, httpx and silverspoon loggers, all levels
    with FakeChatServer(api_key=key, echo_auth=True, script={"fail": 500}) as srv:
        be = OpenAIBackend(srv.model_params(api_key_env="SILVERSPOON_TEST_API_KEY", max_retries=1), backoff_s=0.01)
        ok, bad = be.generate([GenRequest("a", [{"role": "user", "content": "fine"}]),
                               GenRequest("b", [{"role": "user", "content": "fail"}])], GenerationParams())
    assert ok.text == fake_reply("fine")                         # the key was sent and accepted
    assert bad.text is None and "Bearer ***" in bad.error        # the server echoed it; we scrubbed it
    # a server that rejects the key (and echoes it in the 401 message)
    with FakeChatServer(api_key="something-else", echo_auth=True) as srv2:
        be2 = OpenAIBackend(srv2.model_params(api_key_env="SILVERSPOON_TEST_API_KEY", max_retries=0))
        with pytest.raises(SilverspoonError) as denied: be2.generate(_reqs(1), GenerationParams())
    assert "HTTP 401 (AuthenticationError): check the key in the environment variable `SILVERSPOON_TEST_API_KEY`" in str(denied.value)
    shown = [repr(be), str(be), repr(vars(be)), str(be.identity()), repr(be.identity()), bad.error, str(denied.value),
             repr(ok), repr(bad), caplog.text, *(r.getMessage() for r in caplog.records)]
    for s in shown: assert key not in s and key[8:] not in s, s
    assert be.identity() == {"backend": "openai", "base_url": srv.base_url, "id": "fake-model"}
    with pytest.raises(TypeError): pickle.dumps(be._key)

def test_missing_key():
    os.environ.pop("SILVERSPOON_UNSET_API_KEY", None)
    with FakeChatServer() as srv:   # a local server without a key: the dummy key is used
        mp = srv.model_params(api_key_env="SILVERSPOON_UNSET_API_KEY")
        assert resolve_api_key(mp) == "EMPTY"
        g, = OpenAIBackend(mp).generate(_reqs(1), GenerationParams())
        assert g.text == fake_reply(_prompt(0))
    with pytest.raises(SilverspoonError, match="`SILVERSPOON_UNSET_API_KEY` is not set"):
        OpenAIBackend(mp.__class__(backend="openai", id="gpt-4o-2024-08-06", api_key_env="SILVERSPOON_UNSET_API_KEY"))

def test_through_generate_all(tmp_path, monkeypatch):
    "Through the store: failed items are recorded, a rerun asks only for them, cached answers are not re-requested."
    store_mod = pytest.importorskip("silverspoon.engine.store")
    key = "sk-store-" + secrets.token_hex(12)
    monkeypatch.setenv("SILVERSPOON_TEST_API_KEY", key)
    path, gen, reqs = tmp_path/"run.jsonl", GenerationParams(max_new_tokens=16), _reqs(12)
    with FakeChatServer(api_key=key, echo_auth=True, script={_prompt(4): 500, _prompt(7): [429, "stall"]}, stall_seconds=3) as srv:
        be = OpenAIBackend(srv.model_params(api_key_env="SILVERSPOON_TEST_API_KEY", concurrency=3, timeout_s=1.0, max_retries=2, batch_size=4),
                           backoff_s=0.02, max_backoff_s=0.1)
        df = store_mod.generate_all(be, reqs, gen, store_mod.GenerationStore(path), run="t", progress=False)
        assert list(df.item_id) == [r.item_id for r in reqs] and not df.cached.any()
        assert df.answer.isna().tolist() == [i == 4 for i in range(12)]
        assert df.error[4].startswith("InternalServerError: ") and "Bearer ***" in df.error[4]
        assert df.answer[7] == fake_reply(_prompt(7)) and srv.stats()["attempts"][_prompt(7)] == 3
        srv.script = {}; srv.reset()   # the outage is over; rerun
        df2 = store_mod.generate_all(be, reqs, gen, store_mod.GenerationStore(path), run="t", progress=False)
        assert srv.stats()["attempts"] == {_prompt(4): 1}       # only the failed item was asked again
    assert list(df2.answer) == [fake_reply(_prompt(i)) for i in range(12)]
    assert df2.cached.sum() == 11 and not df2.cached[4]
    assert key not in path.read_text() and key[9:] not in path.read_text()


def test_null_content_is_a_failure_not_an_empty_answer():
    "A response without content (content filter, reasoning budget spent) is recorded as failed, so it is counted and retried."
    from types import SimpleNamespace as NS
    from silverspoon.engine.backends.openai import OpenAIBackend
    from silverspoon.core import ModelParams
    be = OpenAIBackend(ModelParams(backend="openai", id="m", base_url="http://127.0.0.1:9/v1"))
    resp = NS(choices=[NS(message=NS(content=None, refusal=None), finish_reason="length")], usage=None, model="m", system_fingerprint=None)
    g = be._to_generation(resp, 0.1)
    assert g.text is None and g.error.startswith("EmptyContent") and "length" in g.error
    resp.choices[0].message.refusal = "I can't help with that."
    assert be._to_generation(resp, 0.1).text == "I can't help with that."


# ---------------------------------------------------------------- issue 8, findings 7 and 8: what a server sends is bounded and checked
def test_reply_byte_cap_stops_a_server_ignoring_max_tokens():
    "A 256 MB reply (with or without Content-Length) is cut at the cap: a recorded failure, not retried, no memory blow-up."
    import tracemalloc
    from silverspoon.engine.backends.openai import reply_byte_cap
    script = {"runaway": "flood", "declared": "flood-sized"}
    with FakeChatServer(script=script) as srv:
        be = OpenAIBackend(srv.model_params(max_retries=3, concurrency=3), backoff_s=0.01)
        be.generate(_reqs(1), GenerationParams())              # build the client (imports) before measuring
        tracemalloc.start()
        t0 = time.perf_counter()
        runaway, declared, ok = be.generate([GenRequest("r", [{"role": "user", "content": "runaway"}]),
                                             GenRequest("d", [{"role": "user", "content": "declared"}]), *_reqs(1)],
                                            GenerationParams(max_new_tokens=100))
        elapsed, (_, peak) = time.perf_counter() - t0, tracemalloc.get_traced_memory()
        tracemalloc.stop()
        time.sleep(0.2); st, log = srv.stats(), list(srv.log)
    cap = reply_byte_cap(100)
    assert cap == 256*1024 + 64*100
    assert runaway.text is None and runaway.error.startswith(f"ReplyTooLarge: the reply from {srv.base_url}/chat/completions passed the cap of {cap:,} bytes for max_tokens=100")
    import re
    m = re.match(rf"ReplyTooLarge: the reply from {re.escape(srv.base_url)}/chat/completions declares ([\d,]+) bytes, over the cap of {cap:,} bytes", declared.error)
    assert m and int(m[1].replace(",", "")) > srv.flood_bytes * 0.99, declared.error
    assert runaway.error.endswith("(after 1 attempt)") and declared.error.endswith("(after 1 attempt)")
    assert st["attempts"]["runaway"] == st["attempts"]["declared"] == 1          # not retried within the run
    assert ok.text == fake_reply(_prompt(0))
    sent = {e["item"]: e["sent"] for e in log if "sent" in e}
    assert max(sent.values()) < srv.flood_bytes / 8, sent                         # the client stopped reading: most was never sent
    assert peak < 32 * 2**20, (peak, elapsed)                                     # memory is behaviour; elapsed is only reported


def test_http_200_error_body_keeps_the_server_message():
    script = {"openai-style": {"error": {"message": "The model `x` is overloaded.", "type": "server_error", "code": 503}},
              "vllm-style": {"object": "error", "message": "This model's maximum context length is 2048 tokens.", "type": "BadRequestError", "code": 400},
              "bare": {"error": "upstream timed out"}, "nothing": {}}
    with FakeChatServer(script=script) as srv:
        gens = OpenAIBackend(srv.model_params(max_retries=1), backoff_s=0.01).generate(
            [GenRequest(k, [{"role": "user", "content": k}]) for k in script], GenerationParams())
    says = [g.error.removeprefix("BadReply: HTTP 200 without choices; the server says: ").removesuffix(" (after 1 attempt)") for g in gens]
    assert says == ["The model `x` is overloaded. (type server_error, code 503)",
                    "This model's maximum context length is 2048 tokens. (type BadRequestError, code 400)",
                    "upstream timed out", "no error message; the reply was {}"], says
    assert all(g.text is None and g.finish_reason == "error" for g in gens)


def test_server_junk_never_poisons_the_store(tmp_path):
    "A server's wrong types become None or a recorded failure; the store stays readable and the failure is retried."
    import warnings
    from silverspoon.engine.store import GenerationStore, generate_all
    junk = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Fine."}, "finish_reason": ["stop"]}],
            "usage": {"prompt_tokens": "lots", "completion_tokens": -3}, "model": {"a": 1}, "system_fingerprint": 5}
    script = {_prompt(0): junk, _prompt(1): {**junk, "choices": [{"index": 0, "message": {"role": "assistant", "content": {"text": "hi"}}}]}}
    path, reqs = tmp_path/"s.jsonl", _reqs(3)
    with FakeChatServer(script=script) as srv:
        be = OpenAIBackend(srv.model_params(max_retries=0))
        df = generate_all(be, reqs, GenerationParams(), GenerationStore(path), run="t", progress=False)
        assert df.answer.tolist()[0] == "Fine." and df.finish_reason.isna()[0] and df.prompt_tokens.isna()[0] and df.completion_tokens.isna()[0]
        assert df.answer.isna().tolist() == [False, True, False] and df.error[1].startswith("BadReply: the answer (message.content) is dict, not text")
        assert dict(model=None, system_fingerprint=None, n=1) in be.served_models()
        srv.script = {}; srv.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning); st = GenerationStore(path)                # every line written is usable
        df2 = generate_all(be, reqs, GenerationParams(), st, run="t", progress=False)
        assert srv.stats()["attempts"] == {_prompt(1): 1} and df2.answer[1] == fake_reply(_prompt(1))


def test_a_wrapped_reply_too_large_is_still_recognised():
    "openai < 3 wraps an exception raised while reading a reply in APIConnectionError (retryable); it must stay ReplyTooLarge."
    import openai
    from silverspoon.engine.backends.openai import ReplyTooLarge
    from silverspoon.core import ModelParams
    class Wrapping:   # stands in for the SDK client
        def __init__(self): self.calls = 0; self.chat = self; self.completions = self
        def create(self, **kw):
            self.calls += 1
            try: raise ReplyTooLarge("the reply from http://x/v1/chat/completions passed the cap")
            except ReplyTooLarge as e: raise openai.APIConnectionError(request=None) from e
    client = Wrapping()
    be = OpenAIBackend(ModelParams(backend="openai", id="m", base_url="http://127.0.0.1:9/v1", max_retries=3), client=client, backoff_s=0.01)
    g, = be.generate(_reqs(1), GenerationParams())
    assert client.calls == 1 and g.error.startswith("ReplyTooLarge: the reply from http://x") and g.error.endswith("(after 1 attempt)")


# ---------------------------------------------------------------- issue 19 (red-team round 2), findings 1, 2, 10, 11
@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_fails_fast_and_names_the_key_variable(monkeypatch, status):
    "Finding 10: HTTP 401/403 stops at once with 'check the key in VAR'; no further request is sent."
    monkeypatch.setenv("SILVERSPOON_TEST_API_KEY", "sk-wrong-" + secrets.token_hex(8))
    with FakeChatServer(script={"": status}) as srv:
        be = OpenAIBackend(srv.model_params(api_key_env="SILVERSPOON_TEST_API_KEY", concurrency=2, max_retries=3), backoff_s=0.01)
        with pytest.raises(SilverspoonError, match=rf"refused the request with HTTP {status} .*check the key in the environment variable "
                                                   r"`SILVERSPOON_TEST_API_KEY`"):
            be.generate(_reqs(20), GenerationParams())
        assert srv.stats()["requests"] <= 2, srv.stats()    # the two in flight; none of the other 18, no retries


def test_auth_error_after_answers_keeps_them():
    "Finding 10, nothing lost: when some items of the batch were answered, they are returned (and stored); the rest are not sent."
    with FakeChatServer(script={_prompt(3): 401}) as srv:
        be = OpenAIBackend(srv.model_params(concurrency=1, max_retries=0))
        gens = be.generate(_reqs(6), GenerationParams())
    assert [g.text is not None for g in gens] == [True, True, True, False, False, False]
    assert gens[3].error.startswith("AuthenticationError") and gens[4].error.startswith("NotSent: the server at")
    assert srv.stats()["requests"] == 4


def test_a_trickling_reply_is_cut_at_timeout_s():
    "Finding 2: headers, then one byte every 0.5 s: the attempt ends at timeout_s (1 s) as a whole, not per read."
    with FakeChatServer(script={"slow": "trickle"}, trickle_seconds=0.5) as srv:
        be = OpenAIBackend(srv.model_params(max_retries=1, timeout_s=1.0), backoff_s=0.01)
        g, ok = be.generate([GenRequest("s", [{"role": "user", "content": "slow"}]), *_reqs(1)], GenerationParams())
        deadline = time.monotonic() + 10
        while len([e for e in srv.log if e.get("outcome") == "trickled"]) < 2 and time.monotonic() < deadline: time.sleep(0.05)
        log = list(srv.log)
    assert g.text is None and g.error.startswith("APITimeoutError") and "model.timeout_s = 1 s bounds each attempt as a whole" in g.error, g.error
    assert g.error.endswith("(after 2 attempts)") and ok.text == fake_reply(_prompt(0))
    sent = [e["sent"] for e in log if e.get("outcome") == "trickled"]
    # the reply is ~300 bytes (150 s at this pace); a per-read timeout would have read it all. Each attempt got a few bytes.
    assert len(sent) == 2 and max(sent) <= 10, sent


def test_redirect_to_another_server_is_refused():
    "Finding 11: a 307 to another host is not followed (the other server never sees the prompt); a redirect on the same server is."
    with FakeChatServer() as other, FakeChatServer() as srv:
        srv.script = {"away": f"redirect:{other.base_url}/chat/completions", "same": [f"redirect:{srv.base_url}/chat/completions"]}
        be = OpenAIBackend(srv.model_params(max_retries=2), backoff_s=0.01)
        away, same = be.generate([GenRequest("a", [{"role": "user", "content": "away"}]),
                                  GenRequest("s", [{"role": "user", "content": "same"}])], GenerationParams())
        assert other.stats()["requests"] == 0
        assert srv.stats()["attempts"]["away"] == 1          # refused, not retried
    assert away.text is None and away.error.startswith(f"RedirectRefused: the server at {srv.base_url}/chat/completions redirected (HTTP 307) "
                                                       f"to another server, {other.base_url}/chat/completions"), away.error
    assert same.text == fake_reply("same")
    assert be.identity()["base_url"] == srv.base_url


@pytest.mark.parametrize("var", ["HOME", "PATH", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"])
def test_backend_refuses_a_variable_that_is_no_api_key(var):
    "Finding 1 (defence in depth): even ModelParams built in code cannot send $HOME or a cloud credential as the bearer token."
    with FakeChatServer(echo_auth=True) as srv:
        with pytest.raises(SilverspoonError, match=f"`{var}` does not name an API key variable"):
            OpenAIBackend(srv.model_params(api_key_env=var))
        assert srv.stats()["requests"] == 0


def test_short_key_never_leaves_the_machine(monkeypatch):
    "Finding 1: a value under 8 characters (which reports cannot scrub safely) is sent only to a local server."
    from silverspoon.core import ModelParams
    monkeypatch.setenv("SILVERSPOON_TEST_API_KEY", "hunter2")
    with pytest.raises(SilverspoonError, match="`SILVERSPOON_TEST_API_KEY` holds 7 characters, too few for an API key"):
        OpenAIBackend(ModelParams(backend="openai", id="m", base_url="https://api.example.com/v1", api_key_env="SILVERSPOON_TEST_API_KEY"))
    with FakeChatServer(api_key="hunter2") as srv:
        g, = OpenAIBackend(srv.model_params(api_key_env="SILVERSPOON_TEST_API_KEY")).generate(_reqs(1), GenerationParams())
    assert g.text == fake_reply(_prompt(0))
