"OpenAIBackend against the in-process FakeChatServer: retries, stalls, bounded concurrency, order, no key leaks."
import os, pickle, time, logging, secrets
from collections import Counter
import pytest

from silverspoon.core import SilverspoonError, GenerationParams
from silverspoon.backends import GenRequest
from silverspoon.api import OpenAIBackend, FakeChatServer, fake_reply, resolve_api_key

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
    elapsed = time.perf_counter() - t0
    assert elapsed < 60, elapsed

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

def test_connection_refused_is_recorded():
    with FakeChatServer() as srv: mp = srv.model_params(max_retries=1, timeout_s=1)
    be = OpenAIBackend(mp, backoff_s=0.01)   # the server is closed now
    g, = be.generate(_reqs(1), GenerationParams())
    assert g.text is None and g.error.startswith("APIConnectionError: ") and "after 2 attempts" in g.error

def test_api_key_never_leaks(monkeypatch, caplog):
    key = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv("SILVERSPOON_TEST_KEY", key)
    caplog.set_level(logging.DEBUG)   # the SDK, httpx and silverspoon loggers, all levels
    with FakeChatServer(api_key=key, echo_auth=True, script={"fail": 500}) as srv:
        be = OpenAIBackend(srv.model_params(api_key_env="SILVERSPOON_TEST_KEY", max_retries=1), backoff_s=0.01)
        ok, bad = be.generate([GenRequest("a", [{"role": "user", "content": "fine"}]),
                               GenRequest("b", [{"role": "user", "content": "fail"}])], GenerationParams())
    assert ok.text == fake_reply("fine")                         # the key was sent and accepted
    assert bad.text is None and "Bearer ***" in bad.error        # the server echoed it; we scrubbed it
    # a server that rejects the key (and echoes it in the 401 message)
    with FakeChatServer(api_key="something-else", echo_auth=True) as srv2:
        be2 = OpenAIBackend(srv2.model_params(api_key_env="SILVERSPOON_TEST_KEY", max_retries=0))
        denied, = be2.generate(_reqs(1), GenerationParams())
    assert denied.error.startswith("AuthenticationError: ")
    shown = [repr(be), str(be), repr(vars(be)), str(be.identity()), repr(be.identity()), bad.error, denied.error,
             repr(ok), repr(bad), caplog.text, *(r.getMessage() for r in caplog.records)]
    for s in shown: assert key not in s and key[8:] not in s, s
    assert be.identity() == {"backend": "openai", "base_url": srv.base_url, "id": "fake-model"}
    with pytest.raises(TypeError): pickle.dumps(be._key)

def test_missing_key():
    os.environ.pop("SILVERSPOON_UNSET_KEY", None)
    with FakeChatServer() as srv:   # a local server without a key: the dummy key is used
        mp = srv.model_params(api_key_env="SILVERSPOON_UNSET_KEY")
        assert resolve_api_key(mp) == "EMPTY"
        g, = OpenAIBackend(mp).generate(_reqs(1), GenerationParams())
        assert g.text == fake_reply(_prompt(0))
    with pytest.raises(SilverspoonError, match="`SILVERSPOON_UNSET_KEY` is not set"):
        OpenAIBackend(mp.__class__(backend="openai", id="gpt-4o-2024-08-06", api_key_env="SILVERSPOON_UNSET_KEY"))

def test_through_generate_all(tmp_path, monkeypatch):
    "Through the store: failed items are recorded, a rerun asks only for them, cached answers are not re-requested."
    store_mod = pytest.importorskip("silverspoon.store")
    key = "sk-store-" + secrets.token_hex(12)
    monkeypatch.setenv("SILVERSPOON_TEST_KEY", key)
    path, gen, reqs = tmp_path/"run.jsonl", GenerationParams(max_new_tokens=16), _reqs(12)
    with FakeChatServer(api_key=key, echo_auth=True, script={_prompt(4): 500, _prompt(7): [429, "stall"]}, stall_seconds=3) as srv:
        be = OpenAIBackend(srv.model_params(api_key_env="SILVERSPOON_TEST_KEY", concurrency=3, timeout_s=1.0, max_retries=2, batch_size=4),
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
    from silverspoon.api import OpenAIBackend
    from silverspoon.core import ModelParams
    be = OpenAIBackend(ModelParams(backend="openai", id="m", base_url="http://127.0.0.1:9/v1"))
    resp = NS(choices=[NS(message=NS(content=None, refusal=None), finish_reason="length")], usage=None, model="m", system_fingerprint=None)
    g = be._to_generation(resp, 0.1)
    assert g.text is None and g.error.startswith("EmptyContent") and "length" in g.error
    resp.choices[0].message.refusal = "I can't help with that."
    assert be._to_generation(resp, 0.1).text == "I can't help with that."
