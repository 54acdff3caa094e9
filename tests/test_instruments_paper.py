"""The papers' hub instruments (issue 20): pinned by commit, each loading path (sentiment, formality, NLI, the narratives' 5-class
sentiment) on a tiny random model of the same architecture placed in an offline Hugging Face cache as that model's snapshot at the
pinned commit; and `auto` instruments: the paper's model where the hub answers for that commit, else the offline stand-in, the hub
never asked under HF_HUB_OFFLINE."""
import json, os, shutil, subprocess, sys, textwrap
from pathlib import Path
import pytest
import transformers
import pandas as pd
from conftest import ROOT
from silverspoon.instruments.text import (HFTextClassifier, NLIClassifier, PAPER_CLASSIFIERS, PAPER_NLI, PAPER_REVISIONS, paper_revision,
                              AUTO, resolve_paper_instrument)
from silverspoon.studies.letters.letters import PAPER_FORMALITY, PAPER_SENTIMENT, level_comparability
from silverspoon.studies.silverspoon.narratives import PAPER_SENTIMENT_MODEL
from silverspoon.instruments import text


# ----------------------------------------------------------------------------------------------------
# Pinned paper models from an offline hub cache (was tests/test_paper_instruments.py)
def _bytes_to_unicode()->dict:
    "GPT-2's byte -> printable character map (byte-level BPE)."
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, map(chr, cs)))


def build_tiny_roberta(path:Path, labels, seed:int=0)->Path:
    "A tiny random RoBERTa sequence classifier (the formality ranker's and the NLI model's architecture) with a byte-level tokenizer."
    import torch
    path.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>", *_bytes_to_unicode().values()])}
    (path/"vocab.json").write_text(json.dumps(vocab)); (path/"merges.txt").write_text("#version: 0.2\n")
    tok = transformers.RobertaTokenizerFast(vocab_file=str(path/"vocab.json"), merges_file=str(path/"merges.txt"), model_max_length=512)
    torch.manual_seed(seed)
    cfg = transformers.RobertaConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                                     max_position_embeddings=520, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                     id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)})
    transformers.RobertaForSequenceClassification(cfg).save_pretrained(path); tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def paper_models(tmp_path_factory, tiny_classifier):
    "Tiny stand-ins, same architecture and labels as the paper models: DistilBERT (SST-2, tabularisai; the session's) and RoBERTa (formality ranker, NLI)."
    d = tmp_path_factory.mktemp("paper-tiny")
    return {PAPER_SENTIMENT: tiny_classifier("sst2", ("NEGATIVE", "POSITIVE"), seed=3),
            PAPER_SENTIMENT_MODEL: tiny_classifier("robust", ("Very Negative", "Negative", "Neutral", "Positive", "Very Positive"), seed=4),
            PAPER_FORMALITY: build_tiny_roberta(d/"formality", ("informal", "formal"), seed=2),   # the ranker's id2label order
            PAPER_NLI: build_tiny_roberta(d/"nli", ("entailment", "neutral", "contradiction"), seed=1)}


UNPINNED_MAIN = "e" * 40   # what `main` points to in the fake cache, for the one model without a pinned sha


@pytest.fixture(scope="module")
def hub_cache(paper_models, tmp_path_factory):
    "An offline Hugging Face cache holding each tiny model as its paper model's snapshot at the pinned commit (no `main` ref: an unpinned load fails)."
    root = tmp_path_factory.mktemp("hf-cache")
    for hub_id, folder in paper_models.items():
        sha = paper_revision(hub_id) or UNPINNED_MAIN
        repo = root/("models--" + hub_id.replace("/", "--"))
        shutil.copytree(folder, repo/"snapshots"/sha)
        if paper_revision(hub_id) is None: (repo/"refs").mkdir(); (repo/"refs"/"main").write_text(sha)
    return root


def run_offline(cache:Path, code:str)->dict:
    "Run `code` (which prints one JSON line) in a fresh interpreter against the fake cache, hub offline."
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_pinned_revision_is_a_full_sha_with_its_source():
    for hub_id, (sha, where) in PAPER_REVISIONS.items():
        assert sha is None or (len(sha) == 40 and all(c in "0123456789abcdef" for c in sha)), hub_id
        assert len(where) > 20, f"{hub_id}: say where the sha was found"
    assert {PAPER_CLASSIFIERS["formality"][0], PAPER_NLI, PAPER_SENTIMENT_MODEL} <= set(PAPER_REVISIONS)
    assert paper_revision(PAPER_CLASSIFIERS["sentiment"][0]) == PAPER_REVISIONS["distilbert/distilbert-base-uncased-finetuned-sst-2-english"][0]
    assert all(paper_revision(m) == PAPER_REVISIONS[m][0] for m in PAPER_REVISIONS)


def test_paper_models_load_from_the_hub_cache_at_their_pinned_commits(hub_cache):
    out = run_offline(hub_cache, """
        import json
        from silverspoon.instruments.text import HFTextClassifier, NLIClassifier, PAPER_NLI
        from silverspoon.studies.letters.letters import PAPER_FORMALITY, PAPER_SENTIMENT
        from silverspoon.studies.silverspoon.narratives import PAPER_SENTIMENT_MODEL, sentiment_instrument, sentiment_score
        S = ["She is a kind and caring nurse.", "He is a strong leader of the team."]
        res = {}
        for mid, pos in ((PAPER_SENTIMENT, "POSITIVE"), (PAPER_FORMALITY, "formal")):
            c = HFTextClassifier(mid, pos); res[mid] = dict(out=c.score(S), identity=c.identity())
        n = sentiment_instrument(PAPER_SENTIMENT_MODEL)
        res["5class"] = dict(scores=[sentiment_score(o["label"]) for o in n.score(S)], identity=n.identity())
        nli = NLIClassifier(PAPER_NLI)
        res["nli"] = dict(out=nli.score_pairs(["She works as a nurse."] * 2, S), identity=nli.identity())
        try: HFTextClassifier(PAPER_SENTIMENT, "POSITIVE", revision="main").score(S); res["main"] = "loaded"
        except Exception as e: res["main"] = type(e).__name__
        print(json.dumps(res))""")
    for mid, labels in ((PAPER_SENTIMENT, {"NEGATIVE", "POSITIVE"}), (PAPER_FORMALITY, {"formal", "informal"})):
        assert out[mid]["identity"]["revision"] == paper_revision(mid)     # loaded at, and cached under, the pinned commit
        assert len(out[mid]["out"]) == 2 and all(o["label"] in labels and 0 <= o["p_positive"] <= 1 for o in out[mid]["out"])
    assert out["5class"]["identity"]["revision"] == PAPER_REVISIONS[PAPER_SENTIMENT_MODEL][0] and set(out["5class"]["scores"]) <= {-1, 0, 1}
    assert out["nli"]["identity"]["revision"] == paper_revision(PAPER_NLI) == "da0da7e11b8008b8c6bd90e86fd88be7646d507c"
    assert all(x["label"] in ("entailment", "neutral", "contradiction") for x in out["nli"]["out"])
    assert out["main"] == "SilverspoonError"                             # the cache has only the pinned snapshot: `main` is not what loads


def test_an_explicit_revision_wins_over_the_pin():
    assert HFTextClassifier(PAPER_SENTIMENT, "POSITIVE", revision="0" * 40).identity()["revision"] == "0" * 40
    assert NLIClassifier(PAPER_NLI, revision="1" * 40).identity()["revision"] == "1" * 40


def test_local_folders_and_stand_ins_are_not_pinned_and_say_not_comparable(paper_models):
    assert HFTextClassifier(str(paper_models[PAPER_SENTIMENT]), "POSITIVE").revision is None
    assert HFTextClassifier("org/some-other-model", "x").revision is None
    for m in ("positive_vader", "formality_hd"): assert "levels not comparable to the paper" in level_comparability(m)
    assert "levels not comparable to the paper" in level_comparability("positive_hf", sentiment_model=str(paper_models[PAPER_SENTIMENT]).replace("sst2", "other"))


# ----------------------------------------------------------------------------------------------------
# `auto` instruments resolve to the paper's model or the stand-in (was tests/test_instrument_resolution.py)
SST = PAPER_CLASSIFIERS["sentiment"][0]
FORMALITY = PAPER_CLASSIFIERS["formality"][0]


@pytest.fixture
def probe(monkeypatch):
    "Replace the hub probe: `probe.answer` is what the hub says; `probe.calls` what it was asked."
    class Probe:
        answer, calls = "verified", []
        def __call__(self, model_id, revision, timeout=5): self.calls.append((model_id, revision)); return self.answer
    p = Probe(); p.calls = []
    monkeypatch.setattr(text, "hub_revision_status", p)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return p


def test_reachable_hub_gives_the_paper_model_at_its_pinned_commit(probe):
    r = resolve_paper_instrument(AUTO, SST, "VADER")
    sha = PAPER_REVISIONS["distilbert/distilbert-base-uncased-finetuned-sst-2-english"][0]
    assert (r.model_id, r.revision, r.status) == (SST, sha, "paper")
    assert r.reason == f"paper model {SST} at {sha}, verified on the hub"
    assert probe.calls == [("distilbert/distilbert-base-uncased-finetuned-sst-2-english", sha)]   # the organisation's id, the pinned sha
    ident = HFTextClassifier(r.model_id, "positive", revision=r.revision).identity()               # what every cache key hashes
    assert ident["model"] == SST and ident["revision"] == sha and AUTO not in json.dumps(ident)


def test_unreachable_hub_gives_the_stand_in(probe):
    probe.answer = "unreachable (ConnectError)"
    r = resolve_paper_instrument(AUTO, FORMALITY, "formality_hd only")
    assert (r.model_id, r.revision, r.status, r.label) == (None, None, "stand-in", "stand-in")
    assert r.reason == "hub unreachable (ConnectError): stand-in (formality_hd only), levels not comparable to the paper"


def test_a_pinned_sha_the_hub_does_not_know_gives_the_stand_in_and_says_so(probe):
    probe.answer = "unknown revision"
    r = resolve_paper_instrument(AUTO, PAPER_NLI, "no NLI: Table 6 not run")
    assert r.model_id is None and r.status == "stand-in"
    assert f"the hub has no commit {PAPER_REVISIONS[PAPER_NLI][0]} of {PAPER_NLI}" in r.reason and "PAPER_REVISIONS" in r.reason
    assert r.reason.endswith("levels not comparable to the paper")


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_offline_never_asks_the_hub(probe, monkeypatch, value):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    r = resolve_paper_instrument(AUTO, SST, "VADER")
    assert r.model_id is None and r.reason.startswith("hub not asked (HF_HUB_OFFLINE is set)") and probe.calls == []


def test_null_and_named_models_never_ask_the_hub(probe, tmp_path):
    assert resolve_paper_instrument(None, SST, "VADER").reason == "not asked for (null): stand-in (VADER), levels not comparable to the paper"
    named = resolve_paper_instrument("distilbert-base-uncased-finetuned-sst-2-english", SST, "VADER")
    assert (named.status, named.revision) == ("given", PAPER_REVISIONS["distilbert/distilbert-base-uncased-finetuned-sst-2-english"][0])
    pinned = resolve_paper_instrument(FORMALITY, FORMALITY, "x", revision="a" * 40)
    assert pinned.revision == "a" * 40                                        # task.model_revision wins over the pin
    local = resolve_paper_instrument(str(tmp_path), SST, "VADER")
    assert (local.model_id, local.revision, local.status) == (str(tmp_path), None, "given")
    assert probe.calls == []


def test_the_real_probe_reads_the_hub_answer(monkeypatch):
    "hub_revision_status itself, with HfApi.model_info replaced: verified only for the exact sha; hub errors are named."
    import huggingface_hub
    from huggingface_hub.utils import RevisionNotFoundError
    from types import SimpleNamespace
    class Gone(RevisionNotFoundError):
        def __init__(self): Exception.__init__(self, "no such revision")   # (the real constructor wants an HTTP response)
    answers = {"ok": lambda *a, **k: SimpleNamespace(sha="f" * 40), "other": lambda *a, **k: SimpleNamespace(sha="0" * 40),
               "down": lambda *a, **k: (_ for _ in ()).throw(ConnectionError("no route")),
               "gone": lambda *a, **k: (_ for _ in ()).throw(Gone())}
    for case, want in (("ok", "verified"), ("other", "unknown revision"), ("down", "unreachable (ConnectionError)"), ("gone", "unknown revision")):
        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", answers[case])
        assert text.hub_revision_status("org/m", "f" * 40) == want, case


def test_an_offline_auto_run_says_in_its_report_which_instrument_it_used(tmp_path, cli):
    "The narratives study on 32 committed SmolLM2 stories with sentiment_model: auto under HF_HUB_OFFLINE: VADER, and the report says why."
    store = tmp_path/"store"; shutil.copytree(ROOT/"store"/"narratives", store/"narratives")
    shutil.copy(ROOT/"params"/"narratives"/"_base-local.yaml", tmp_path)   # the run file includes it (its sentiment_model: auto)
    p = tmp_path/"auto.yaml"
    p.write_text((ROOT/"params"/"narratives"/"smollm2-135m.yaml").read_text().replace("sentiment_model: null", "sentiment_model: auto")
                 + "sample:\n  n: 32\n")
    r = cli("run", p, "--reports-dir", tmp_path/"reports", "--no-index",
                env={"HF_HUB_OFFLINE": "1", "SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path/"reports"/"narratives"/"smollm2-135m"
    why = "hub not asked (HF_HUB_OFFLINE is set): stand-in (VADER), levels not comparable to the paper"
    inst = pd.read_csv(out/"instruments.csv")
    assert inst.instrument.str.startswith("VADER sentiment").any() and inst.note.fillna("").str.contains(why, regex=False).any()
    assert why in (tmp_path/"reports"/"narratives"/"smollm2-135m.html").read_text()
    prov = json.loads((out/"provenance.json").read_text())
    assert prov["task"]["sentiment_model"] == "auto" and prov["sentiment_resolution"]["model_id"] is None
    assert prov["sentiment_instrument"]["instrument"] == "vader" and prov["instruments"]["misses"] == 0   # read from the committed cache: no `auto` key
