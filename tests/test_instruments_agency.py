"Agency classifier (appendix F.2): a tiny random BERT trained end to end on the released splits, in seconds."
import json, math, time
import numpy as np
import pytest
pytestmark = pytest.mark.colab_lane   # stack-sensitive, run by `make test-colab` only: training a tiny BERT with torch/transformers: determinism and checkpoints depend on the stack
from silverspoon.core import ParamsError
from silverspoon.studies.letters.agency import (AgencyTrainConfig, train_agency_classifier, agency_metrics_table, confusion_table,
                                        PAPER_CONFIG)
from silverspoon.studies.letters.letters import load_agency_split


@pytest.fixture(scope="module")
def cfg(tiny_bert): return AgencyTrainConfig(base_model=str(tiny_bert), epochs=3, lr=1e-3, lr_note="tiny random BERT test", max_length=64)

@pytest.fixture(scope="module")
def run(cfg, tmp_path_factory):
    out = tmp_path_factory.mktemp("agency")/"run"
    t0 = time.perf_counter(); r = train_agency_classifier(cfg, out, progress=False); secs = time.perf_counter() - t0
    return r, out, secs


def test_trains_on_all_three_splits_and_keeps_the_best_val_epoch(run):
    r, out, secs = run
    print(f"tiny end-to-end training took {secs:.1f} s")   # reported, never asserted: speed belongs in benchmarks
    assert r["n"] == dict(train=192, val=48, test=60) and len(r["history"]) == 3 and not r["reused"]
    vals = [h["val_accuracy"] for h in r["history"]]
    assert r["best_epoch"] == 1 + int(np.argmax(vals)) and r["best_val_accuracy"] == max(vals)   # first epoch with the max
    assert all(math.isfinite(h["train_loss"]) for h in r["history"])
    t = r["test"]
    assert t["n"] == 60 and t["ci_method"] == "Wilson 95%" and t["ci_low"] <= t["accuracy"] <= t["ci_high"]
    assert t["confusion"]["labels"] == ["communal", "agentic"] and np.array(t["confusion"]["matrix"]).sum(axis=1).tolist() == [27, 33]
    assert {c: d["support"] for c, d in t["per_class"].items()} == {"communal": 27, "agentic": 33}
    assert r["identity"]["data_source"] == "registry" and r["model_dir"] == str(out)
    json.dumps(r)


def test_saved_model_is_the_best_checkpoint(run):
    "The saved weights reproduce the reported test accuracy, so the best epoch (not the last) was saved."
    import torch
    from transformers import AutoTokenizer, AutoModelForSequenceClassification
    r, out, _ = run
    tok, model = AutoTokenizer.from_pretrained(out), AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert model.config.id2label == {0: "communal", 1: "agentic"}
    test = load_agency_split()["test"]
    with torch.no_grad():
        logits = model(**tok(list(test.text), truncation=True, max_length=64, padding=True, return_tensors="pt")).logits
    assert math.isclose(float((logits.argmax(-1).numpy() == test.label.to_numpy()).mean()), r["test"]["accuracy"])


def test_second_call_reuses_the_saved_model(run, cfg):
    r, out, _ = run
    mtime = (out/"model.safetensors").stat().st_mtime_ns
    r2 = train_agency_classifier(cfg, out, progress=False)
    assert r2["reused"] and (out/"model.safetensors").stat().st_mtime_ns == mtime   # reused: nothing retrained or rewritten
    same = lambda d: json.dumps({k: v for k, v in d.items() if k != "reused"}, sort_keys=True)   # NaN-safe comparison
    assert same(r2) == same(r)
    with pytest.raises(ParamsError, match="different identity"):
        train_agency_classifier(AgencyTrainConfig(**{**cfg.identity()["config"], "seed": 1}), out, progress=False)


def test_deterministic_on_cpu(run, cfg, tmp_path):
    r, _, _ = run
    again = train_agency_classifier(cfg, tmp_path/"again", progress=False)
    assert again["history"][0]["train_loss"] == r["history"][0]["train_loss"]
    assert [h["val_accuracy"] for h in again["history"]] == [h["val_accuracy"] for h in r["history"]] and json.dumps(again["test"]) == json.dumps(r["test"])


def test_identity_and_tables(run):
    r, _, _ = run
    ident = PAPER_CONFIG.identity()
    assert ident["config"]["lr"] == 2e-5 and ident["config"]["epochs"] == 10 and ident["config"]["batch_size"] == 16
    assert set(ident["data_sha256"]) == {"train", "val", "test"} and "model.safetensors" in ident["base_model"]["files"]
    mt, ct = agency_metrics_table(r), confusion_table(r)
    assert mt.iloc[0].metric == "test accuracy" and mt.iloc[0].n == 60 and ct.to_numpy().sum() == 60


def _per_letter(sent_share, piece_share, per_ac):
    import pandas as pd
    return pd.DataFrame({"agentic": sent_share, "agentic_authors_pieces": piece_share, "per_ac": per_ac})


def test_split_share_of_gap_on_a_small_fixture():
    "Four letters scored by hand: sentences 0.9/1.0/0.8/0.7, pieces 0.5/0.8/0.6/0.5, per_ac 0.1/0.2/0.2/0.1."
    from silverspoon.studies.letters.agency import split_share_of_gap
    t = split_share_of_gap(_per_letter([0.9, 1.0, 0.8, 0.7], [0.5, 0.8, 0.6, 0.5], [0.1, 0.2, 0.2, 0.1]), n_boot=500).set_index("statistic")
    est = t.estimate
    # means: sentences 0.85, pieces 0.60, per_ac 0.15 -> gaps 0.70 and 0.45, split effect 0.25, share 0.25 / 0.70
    for k, v in {"level, sentences": 0.85, "level, pieces": 0.60, "level, authors": 0.15, "gap with sentences (sentences - authors)": 0.70,
                 "gap with pieces (pieces - authors)": 0.45, "split effect (sentences - pieces)": 0.25, "split share of the gap": 0.25 / 0.70}.items():
        assert math.isclose(est[k], v, abs_tol=1e-12), k
    assert (t.n_letters == 4).all()
    assert (t.ci_low <= t.estimate + 1e-12).all() and (t.estimate <= t.ci_high + 1e-12).all()
    s = t.loc["split share of the gap"]
    assert s.ci_high - s.ci_low > 0.01                      # letters differ, so resampling them moves the share
    again = split_share_of_gap(_per_letter([0.9, 1.0, 0.8, 0.7], [0.5, 0.8, 0.6, 0.5], [0.1, 0.2, 0.2, 0.1]), n_boot=500)
    assert again.equals(t.reset_index()[again.columns])    # seeded: the same CI twice


def test_split_share_of_gap_drops_letters_without_pieces_and_refuses_too_few():
    from silverspoon.studies.letters.agency import split_share_of_gap
    t = split_share_of_gap(_per_letter([0.9, 0.8, 0.6], [0.5, np.nan, 0.4], [0.1, 0.1, 0.2]), n_boot=50).set_index("statistic")
    assert (t.n_letters == 2).all() and math.isclose(t.estimate["split effect (sentences - pieces)"], 0.3, abs_tol=1e-12)
    with pytest.raises(ValueError, match="needs 2\\+ letters"):
        split_share_of_gap(_per_letter([0.9, 0.8], [0.5, np.nan], [0.1, np.nan]))
