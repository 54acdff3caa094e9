"Text instruments and their per-item cache: tiny random classifier/NLI models, resume, kill -9, two concurrent runs, VADER, formality, MiniLM."
import json, os, signal, subprocess, sys, textwrap, time, warnings
from collections import Counter
import numpy as np
import pytest
pytestmark = pytest.mark.colab_lane   # stack-sensitive, run by `make test-colab` only: transformers classifiers/NLI/MiniLM and spaCy: outputs depend on the stack
from silverspoon.core import ParamsError, SilverspoonError, load_params
from silverspoon.engine.store import GenerationStore, record_problem
from silverspoon.instruments.text import (HFTextClassifier, InstrumentStore, NLIClassifier, SpacyAnalysis, TextEmbedder, VaderSentiment,
                              build_tiny_classifier, instrument_id, instrument_store_for, lexical_formality, minilm_path,
                              score_cached, score_pairs_cached, sentences_of, split_sentences, split_sentences_many)

from conftest import ROOT


@pytest.fixture(scope="module")
def models(tiny_classifier):
    "A tiny random agency classifier and a tiny random NLI model (the session's, built offline once)."
    return {"agency": tiny_classifier("agency", ("communal", "agentic")),
            "nli": tiny_classifier("nli", ("entailment", "neutral", "contradiction"), seed=1)}


@pytest.fixture(scope="module")
def letters():
    "Three released ChatGPT CBG letters."
    from silverspoon.studies.letters.letters import load_cbg_letters
    return load_cbg_letters(["f_chefs"]).letter.tolist()[:3]


SENTS = ["She is kind and caring.", "He is a strong leader.", "She is kind and caring.", "They work with the team.",
         "Her work is great.", "He was born in London."]


def test_classifier_cache_resume_and_torn_line(models, tmp_path):
    path = tmp_path/"letters"/"run.instruments.jsonl"
    clf = HFTextClassifier(str(models["agency"]), "AGENTIC", batch_size=2, name="agency")
    first = score_cached(clf, SENTS, InstrumentStore(path), progress=False)
    assert first[0] == first[2] and len(first) == len(SENTS) and clf.n_loads == 1
    assert all(set(o) == {"label", "p_positive"} and o["label"] in ("communal", "agentic") and 0 <= o["p_positive"] <= 1 for o in first)
    recs = [json.loads(l) for l in path.read_text().splitlines()]
    assert len(recs) == 5 and all(set(r) == {"key", "instrument", "out"} for r in recs)        # the repeat is stored once
    assert {r["instrument"] for r in recs} == {instrument_id(clf.identity())}
    assert not any(t in path.read_text() for t in SENTS)                                        # texts are not stored
    # a second process: everything cached, the model is never loaded
    again, st = HFTextClassifier(str(models["agency"]), "agentic", name="agency"), InstrumentStore(path)
    assert score_cached(again, SENTS, st, progress=False) == first and again.n_loads == 0
    assert st.summary()["instruments"]["agency"]["hits"] == 6 and st.misses == 0
    # killed while writing the last batch: the torn record is rescored, nothing else
    data = path.read_bytes(); path.write_bytes(data[:-30])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always"); st = InstrumentStore(path)
    assert any("not JSON" in str(x.message) for x in w) and len(st) == 4
    third = HFTextClassifier(str(models["agency"]), "agentic", name="agency")
    assert score_cached(third, SENTS, st, progress=False) == first
    assert (third.n_loads, st.counts["agency"]["misses"], st.counts["agency"]["hits"]) == (1, 1, 5)
    fresh = InstrumentStore(path)
    assert len(fresh) == 5 and fresh.n_bad_lines == 1
    # another positive label is another instrument: scored again, p_positive complements
    comm = score_cached(HFTextClassifier(str(models["agency"]), "communal", name="agency"), SENTS[:2], fresh, progress=False)
    assert all(abs(a["p_positive"] + b["p_positive"] - 1) < 1e-5 for a, b in zip(comm, first))


def test_classifier_label_error(models):
    with pytest.raises(ParamsError, match=r"positive_label 'formal' is not one of the model's labels \['communal', 'agentic'\]"):
        HFTextClassifier(str(models["agency"]), "formal").score(["x"])
    with pytest.raises(SilverspoonError, match="could not load the model"):
        HFTextClassifier(str(ROOT/"no-such-model-folder"), "x").score(["x"])


def test_identity(models, tmp_path):
    a = HFTextClassifier(str(models["agency"]), "agentic")
    ident = a.identity()
    assert ident["model"] == "agency" and len(ident["weights"]) == 20 and ident["positive_label"] == "agentic"
    assert HFTextClassifier(str(models["agency"]), "agentic", batch_size=7, device="cpu").identity() == ident   # speed settings do not count
    assert HFTextClassifier(str(models["agency"]), "agentic", max_length=128).identity() != ident
    hub = HFTextClassifier("s-nlp/roberta-base-formality-ranker", "formal", revision="abc").identity()
    assert (hub["model"], hub["revision"]) == ("s-nlp/roberta-base-formality-ranker", "abc")
    other = build_tiny_classifier(tmp_path/"agency", labels=("communal", "agentic"), seed=5)      # same name, other weights
    assert HFTextClassifier(str(other), "agentic").identity()["weights"] != ident["weights"]


def test_nli_pairs(models, tmp_path):
    st = InstrumentStore(tmp_path/"nli.jsonl")
    bio = "She was born in London and works as an engineer. " * 80                                 # longer than the window
    ps = [bio, bio, "He is a teacher.", bio]
    hs = ["She is an engineer.", "She lives in Paris.", "He is a teacher.", "She is an engineer."]
    nli = NLIClassifier(str(models["nli"]), batch_size=2)
    out = score_pairs_cached(nli, ps, hs, st, progress=False)
    assert out[0] == out[3] and len(out) == 4 and st.counts["nli"]["misses"] == 3
    assert all(o["label"] in ("entailment", "neutral", "contradiction") and 0 <= o["p_entailment"] <= 1 for o in out)
    nli2 = NLIClassifier(str(models["nli"]))
    assert score_pairs_cached(nli2, ps, hs, InstrumentStore(tmp_path/"nli.jsonl"), progress=False) == out and nli2.n_loads == 0
    # a premise and hypothesis swapped is another pair
    score_pairs_cached(nli, [hs[0]], [ps[0]], st, progress=False); assert st.counts["nli"]["misses"] == 4
    with pytest.raises(ParamsError, match="have no 'entailment'; pass `id2label`"):
        NLIClassifier(str(models["agency"])).score_pairs(["a"], ["b"])
    with pytest.raises(SilverspoonError, match="use `score_pairs"):
        nli.score(["x"])


def test_records_checked_and_kept_apart(tmp_path):
    path = tmp_path/"c.jsonl"
    st = InstrumentStore(path)
    score_cached(VaderSentiment(), ["Great work.", "Bad work."], st, progress=False)
    with open(path, "a") as f:
        f.write(json.dumps({"key": "x", "instrument": "y", "out": [1]}) + "\n")   # not an object
        f.write(json.dumps({"key": "x", "run": "r"}) + "\n")                       # a generation-like line
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always"); st2 = InstrumentStore(path)
    assert len(st2) == 2 and st2.n_bad_lines == 2 and "field `out` must be an object" in str(w[0].message)
    # the generation store's own check is unchanged: it refuses instrument records
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always"); g = GenerationStore(path)
    assert len(g) == 0 and g.check is record_problem
    with pytest.raises(ValueError, match="not a usable store record"):
        score_cached(VaderSentiment(), ["x"], GenerationStore(None), progress=False)
    with pytest.raises(ValueError, match=r"texts\[1\] is a float"):
        score_cached(VaderSentiment(), ["x", float("nan")], st, progress=False)


def test_instrument_store_for(tmp_path, monkeypatch):
    monkeypatch.setenv("SILVERSPOON_STORE", str(tmp_path))
    pr = load_params({"study": "letters", "run": "cbg-chatgpt", "model": {"backend": "replay", "id": "chatgpt"}})
    assert instrument_store_for(pr).path == tmp_path/"letters"/"cbg-chatgpt.instruments.jsonl"
    (tmp_path/"file").write_text("x"); monkeypatch.setenv("SILVERSPOON_STORE", str(tmp_path/"file"))
    with pytest.warns(UserWarning, match="the instrument cache cannot be written"):
        instrument_store_for(pr)


def test_vader_real_sentences():
    out = VaderSentiment().score(["She is an exceptional and inspiring leader.", "He failed to deliver and was often rude.",
                                  "The position starts in September."])
    assert [o["label"] for o in out] == ["positive", "negative", "neutral"]
    assert out[0]["compound"] >= 0.05 and out[1]["compound"] <= -0.05
    strict = VaderSentiment(positive=0.99, negative=-0.99)
    assert strict.score(["She is an exceptional and inspiring leader."])[0]["label"] == "neutral"
    assert strict.identity() != VaderSentiment().identity()


def test_spacy_analysis_and_formality(letters):
    sa = SpacyAnalysis()
    outs = sa.score(letters)
    for text, o in zip(letters, outs):
        sents = sentences_of(text, o)
        assert sents == split_sentences(text) and len(sents) > 5
        assert all(s == s.strip() and "\n" not in s for s in sents)
        assert o["nouns"] and o["adjs"] and all(w == w.lower() for w in o["nouns"] + o["adjs"])
        assert len(o["nouns"]) == len(o["noun_lemmas"]) == o["pos"]["NOUN"]
        assert 40 < lexical_formality(o["pos"]) < 90                    # letters are fairly formal prose
    # the hand-checked examples, through spaCy
    f = lambda s: lexical_formality(sa.score([s])[0]["pos"])
    assert abs(f("The doctors gave a clear answer.") - 250/3) < 1e-9 and f("Oh, I really like it!") == 0
    assert f("This award is given to the best chef of the region.") > f("I think she really wanted it so much.")
    assert split_sentences_many(letters, "period") == [[s.strip() for s in t.split(".") if s.strip()] for t in letters]


def test_minilm():
    assert (minilm_path()/"config.json").is_file()
    E = TextEmbedder().embed(["doctor", "nurse", "banana", "physician"])
    assert E.shape == (4, 384) and np.allclose(np.linalg.norm(E, axis=1), 1, atol=1e-5)
    assert E[0] @ E[3] > E[0] @ E[2] and E[0] @ E[1] > E[0] @ E[2]


# A run in its own process: a slow deterministic instrument through score_cached. Each scored batch is logged to a
# side file after it is stored, so the test can count how often each text was scored across runs.
SCRIPT = textwrap.dedent('''
    import sys, time, json
    from silverspoon.instruments.text import Instrument, InstrumentStore, score_cached
    store_path, side_path, n, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    class Slow(Instrument):
        name, batch_size = "slow", 4
        def identity(self): return {"instrument": "slow", "version": 1}
        def score(self, texts):
            time.sleep(0.1)
            with open(side_path, "a") as f: f.write(json.dumps(texts) + "\\n")
            return [{"len": len(t)} for t in texts]
    texts = [f"text number {i:03d}" + "!" * (i % 5) for i in range(n)]
    out = score_cached(Slow(), texts, InstrumentStore(store_path), progress=False)
    json.dump(out, open(out_path, "w"))
''')


def _run(tmp_path, n, name):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path/"slow.jsonl"), str(tmp_path/"side.log"), str(n), str(tmp_path/name)],
                            env=env, stderr=subprocess.PIPE)


def _scored(tmp_path):
    return Counter(t for line in (tmp_path/"side.log").read_text().splitlines() for t in json.loads(line))


def test_kill_then_resume_and_concurrent_runs(tmp_path):
    n = 40
    p = _run(tmp_path, n, "a.json")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:                                   # kill -9 after a few stored batches
        if (tmp_path/"slow.jsonl").exists() and len((tmp_path/"slow.jsonl").read_bytes().splitlines()) >= 12: break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL); p.wait()
    stored = len(InstrumentStore(tmp_path/"slow.jsonl"))
    assert 12 <= stored < n
    # two resumed runs at once: one scores the rest under the lock, the other waits and scores nothing
    a, b = _run(tmp_path, n, "b.json"), _run(tmp_path, n, "c.json")
    assert a.wait(60) == 0 and b.wait(60) == 0, (a.stderr.read(), b.stderr.read())
    counts = _scored(tmp_path)
    assert len(counts) == n and max(counts.values()) <= 2                # every text scored; at most the killed batch twice
    assert sum(v == 2 for v in counts.values()) <= 4
    final = InstrumentStore(tmp_path/"slow.jsonl")
    assert len(final) == n and final.n_bad_lines <= 1
    outs = [json.loads((tmp_path/f).read_text()) for f in ("b.json", "c.json")]
    assert outs[0] == outs[1] and outs[0][3] == {"len": len("text number 003!!!")}
