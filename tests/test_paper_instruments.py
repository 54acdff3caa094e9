"""The papers' hub instruments pinned by commit (issue 20): the loading path of each (sentiment, formality, NLI, the
narratives' 5-class sentiment) on a tiny random model of the same architecture, built here and placed in an offline
Hugging Face cache as that model's snapshot at the pinned commit; the hub is never reached."""
import json, os, shutil, subprocess, sys, textwrap
from pathlib import Path
import pytest
import transformers
from silverspoon.instruments.text import (HFTextClassifier, NLIClassifier, PAPER_CLASSIFIERS, PAPER_NLI, PAPER_REVISIONS, build_tiny_classifier,
                              paper_revision)
from silverspoon.studies.letters.letters import PAPER_FORMALITY, PAPER_SENTIMENT, level_comparability
from silverspoon.studies.silverspoon.narratives import PAPER_SENTIMENT_MODEL, sentiment_instrument, sentiment_score


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
def tiny(tmp_path_factory):
    "Tiny stand-ins, same architecture and labels as the paper models: DistilBERT (SST-2, tabularisai) and RoBERTa (formality ranker, NLI)."
    d = tmp_path_factory.mktemp("paper-tiny")
    return {PAPER_SENTIMENT: build_tiny_classifier(d/"sst2", ("NEGATIVE", "POSITIVE"), seed=3),
            PAPER_SENTIMENT_MODEL: build_tiny_classifier(d/"robust", ("Very Negative", "Negative", "Neutral", "Positive", "Very Positive"), seed=4),
            PAPER_FORMALITY: build_tiny_roberta(d/"formality", ("informal", "formal"), seed=2),   # the ranker's id2label order
            PAPER_NLI: build_tiny_roberta(d/"nli", ("entailment", "neutral", "contradiction"), seed=1)}


UNPINNED_MAIN = "e" * 40   # what `main` points to in the fake cache, for the one model without a pinned sha


@pytest.fixture(scope="module")
def hub_cache(tiny, tmp_path_factory):
    "An offline Hugging Face cache holding each tiny model as its paper model's snapshot at the pinned commit (no `main` ref: an unpinned load fails)."
    root = tmp_path_factory.mktemp("hf-cache")
    for hub_id, folder in tiny.items():
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


def test_local_folders_and_stand_ins_are_not_pinned_and_say_not_comparable(tiny):
    assert HFTextClassifier(str(tiny[PAPER_SENTIMENT]), "POSITIVE").revision is None
    assert HFTextClassifier("org/some-other-model", "x").revision is None
    for m in ("positive_vader", "formality_hd"): assert "levels not comparable to the paper" in level_comparability(m)
    assert "levels not comparable to the paper" in level_comparability("positive_hf", sentiment_model=str(tiny[PAPER_SENTIMENT]).replace("sst2", "other"))
