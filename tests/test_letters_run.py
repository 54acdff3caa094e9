"""Reference letters end to end (issue 10): a replay run through `silverspoon run` with every instrument on tiny models built here
(the paper's HF formality and sentiment classifiers, the NLI hallucination detector, the agency classifier), then a rerun that
reads every instrument output from the cache."""
import json
import pandas as pd
import pytest
from conftest import run_cli
from silverspoon.instruments.text import build_tiny_classifier
from silverspoon.studies.letters.agency import make_tiny_bert


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return {"nli": build_tiny_classifier(d/"nli", ("entailment", "neutral", "contradiction"), seed=1),
            "formality": build_tiny_classifier(d/"formality", ("informal", "formal"), seed=2),
            "sentiment": build_tiny_classifier(d/"sentiment", ("NEGATIVE", "POSITIVE"), seed=3),
            "bert": make_tiny_bert(d/"bert")}


def _params(tmp_path, tiny, **task):
    t = dict(context="cbg", agency=True, agency_base_model=str(tiny["bert"]), agency_epochs=1, formality_model=str(tiny["formality"]),
             sentiment_model=str(tiny["sentiment"]), nli_model=str(tiny["nli"]), n_boot=50, weat_n_perm=200, min_count=2)
    t.update(task)
    p = tmp_path/"tiny-letters.yaml"
    p.write_text(json.dumps({"study": "letters", "run": "tiny-letters", "model": {"backend": "replay", "id": "chatgpt"},
                             "sample": {"n": 8, "stratify_by": "group", "seed": 0}, "task": t}))
    return p


def test_letters_run_with_every_instrument_then_a_cached_rerun(tmp_path, tiny):
    p, reports, store, cache = _params(tmp_path, tiny), tmp_path/"reports", tmp_path/"store", tmp_path/"cache"
    env = {"SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(cache), "XDG_CACHE_HOME": str(cache)}
    r = run_cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = reports/"letters"/"tiny-letters"
    style = pd.read_csv(out/"style.csv")
    assert set(style.measure) == {"positive_vader", "formality_hd", "agentic", "p_agentic", "formal_hf", "positive_hf"}
    assert (style.paired_ci_low.isna() == (style.n_pairs < 5)).all() and style.paired_ci_note.str.startswith("no interval").all()   # 4 pairs: no interval
    assert (style.n_m + style.n_f == 8).all() and (style.n_pairs <= 4).all()
    hal = pd.read_csv(out/"hallucination.csv")
    assert set(hal.gender) == {"f", "m"} and set(hal.measure) == {"positive_vader", "agentic", "p_agentic", "formal_hf", "positive_hf"}
    assert hal.n_sentences.sum() > 8 and set(hal.reading) <= {"propagation", "amplification", "attenuation", "no estimate"}
    assert (hal.reading == "no estimate").all() and hal.p_student.isna().all()   # at most 4 letters a gender hallucinate: too few units for any test
    for pc in ("p_student", "p_welch", "p_swap", "p_paired_t", "p_wilcoxon"):      # the policy: a BH partner beside every p; none from 4 letters a gender
        assert f"{pc}_bh" in style and style[pc].isna().all(), pc
    assert style.g_ci_low.isna().all() and style.diff_ci_note.eq("no interval or test: too few units: 4 < 5").all()
    summ = pd.read_csv(out/"summary.csv").set_index("metric")
    cards = summ.loc[["p_agentic m-f", "OR Agentic"]]   # the card's headlines declare their test and null (no p from 4 letters a gender)
    assert cards.test.eq("within-pair gender swap permutation over twin pairs").all() and cards.null.tolist() == [0.0, 1.0] and (cards.n_units == 4).all()
    assert cards.p.isna().all() and summ.p.notna().sum() == 0
    acc = pd.read_csv(out/"agency_classifier.csv")
    assert acc.loc[acc.metric == "test accuracy", "n"].item() == 60
    assert pd.read_csv(out/"success.csv").set_index("gender").loc["all", ["n", "not_an_answer"]].tolist() == [8, 0]
    answered = pd.read_csv(out/"answer_summary.csv").iloc[0]   # replay: every released letter passes the reply gate, and none is copied into answers.csv
    assert (answered.replies, answered.answered, answered.not_an_answer) == (8, 8, 0) and answered.verdict_allowed
    assert "reply" not in pd.read_csv(out/"answers.csv").columns
    for f in ("lexicon_odds_ratios", "table3", "table3_overlap", "weat", "weat_sign_check", "summary"): assert (out/f"{f}.csv").is_file(), f
    assert pd.read_csv(out/"lexicon_odds_ratios.csv").or_ci_low.isna().all()   # 4 letters per gender: too few for a letter bootstrap
    inst = pd.read_csv(out/"instruments.csv")   # a generated CBG run's instruments, measured on the authors' released CLG letters (their scores exist for those only)
    agree = inst[inst.measure.notna()]
    assert set(agree.measure) == {"positive_vader", "formality_hd", "agentic", "p_agentic", "formal_hf", "positive_hf"} and (agree.n == 120).all()
    assert agree.reference.str.startswith("measured on the authors' released CLG letters, not on this run's letters").all()
    named = inst[inst.measure.isna()]
    assert named.instrument.str.startswith(("task.formality_model: ", "task.sentiment_model: ", "task.nli_model: ")).all() and len(named) == 3
    assert (named.kind == "model named in the params").all() and named.note.str.contains("as the params name it").all()
    first = json.loads((out/"provenance.json").read_text())["instruments"]
    assert first["misses"] > 0 and (store/"letters"/"tiny-letters.instruments.jsonl").is_file()
    # the rerun computes nothing: every instrument output (and the agency training result) comes from the cache
    r = run_cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out/"provenance.json").read_text())["instruments"]
    assert again["misses"] == 0 and again["hits"] >= first["misses"]   # hits count every input, repeated sentences included
    assert pd.read_csv(out/"style.csv").equals(style) and pd.read_csv(out/"hallucination.csv").equals(hal)


@pytest.mark.parametrize("task,needle", [({"groups": ["f_dancers"]}, "no released letters for ['f_dancers', 'f_models', 'm_writers']"),
                                         ({"context": "clg", "groups": ["f_chefs"]}, "applies to context cbg only"),
                                         ({"top_k": 0}, "field `task.top_k` = 0")])
def test_bad_letters_params_stop_before_running(tmp_path, tiny, task, needle):
    p = _params(tmp_path, tiny, **task)
    r = run_cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not (tmp_path/"reports").exists()


def test_clg_replay_sets_the_agency_classifier_beside_the_authors_per_ac(tmp_path, tiny):
    "CLG replay with the (tiny) agency classifier: level and per-letter agreement with the authors' per_ac, and how sure the classifier is."
    p = _params(tmp_path, tiny, context="clg", success_filter=False, formality_model=None, sentiment_model=None, nli_model=None)
    env = {"SILVERSPOON_STORE": str(tmp_path/"store"), "SILVERSPOON_CACHE": str(tmp_path/"cache"), "XDG_CACHE_HOME": str(tmp_path/"cache")}
    r = run_cli("run", p, "--reports-dir", tmp_path/"reports", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path/"reports"/"letters"/"tiny-letters"
    agr = pd.read_csv(out/"agency_vs_authors.csv").set_index("measure")
    assert list(agr.index) == ["agentic", "p_agentic", "agentic_authors_pieces", "p_agentic_authors_pieces", "agentic_fitted_threshold"] and (agr.n == 8).all()
    assert (agr.authors_per_ac.nunique() == 1) and ((agr.level_diff - (agr.ours - agr.authors_per_ac)).abs() < 1e-12).all()
    assert agr.level_diff_ci_low.ge(-1).all() and agr.level_diff_ci_high.le(1).all() and agr.within_tolerance.dtype == bool
    prob = pd.read_csv(out/"agency_probabilities.csv").iloc[0]
    assert prob.n_sentences > 8 and 0 <= prob.p_min <= prob.p_median <= prob.p_max <= 1
    inst = pd.read_csv(out/"instruments.csv")   # the letters' instruments table, in the one contract: the validity page lists it
    agree = inst[inst.measure.notna()]   # rows task.*: which of the paper's instruments ran, and why (n = 0: not an agreement)
    assert "p_agentic" in set(agree.measure) and inst.agreement.isna().all() and (agree.n == 8).all()
    assert inst.instrument[inst.measure.isna()].tolist() == ["task.formality_model: stand-in", "task.sentiment_model: stand-in"] and (inst.n[inst.measure.isna()] == 0).all()
    split = pd.read_csv(out/"agency_split_share.csv").set_index("statistic")      # the split's share of the gap, from the same levels
    sen, pie, auth = agr.loc["agentic", "ours"], agr.loc["agentic_authors_pieces", "ours"], agr.loc["agentic", "authors_per_ac"]
    assert abs(split.loc["split effect (sentences - pieces)", "estimate"] - (sen - pie)) < 1e-9 and (split.n_letters == 8).all()
    if sen != auth: assert abs(split.loc["split share of the gap", "estimate"] - (sen - pie) / (sen - auth)) < 1e-9


def test_a_run_with_no_letter_to_compare_ends_early_and_is_published(tmp_path):
    "No letter passes B.2 (none says 'recommend'): the run ends at `Report.end`, is published with its counts, and every comparison is NaN."
    p = tmp_path/"never-recommends.yaml"
    p.write_text(json.dumps({"study": "letters", "run": "never-recommends", "model": {"backend": "scripted", "id": "text:She is a dancer of great skill."},
                             "sample": {"n": 4, "stratify_by": "group", "seed": 0}, "task": {"context": "cbg", "agency": False, "n_boot": 20, "weat_n_perm": 50}}))
    reports = tmp_path/"reports"
    r = run_cli("run", p, "--reports-dir", reports, env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 0, r.stdout + r.stderr
    out = reports/"letters"/"never-recommends"
    assert pd.read_csv(out/"success.csv").set_index("gender").loc["all", ["n", "ok"]].tolist() == [4, 0]
    s = pd.read_csv(out/"summary.csv").set_index("metric")
    assert s.loc["success rate", "estimate"] == 0 and s.drop("success rate").estimate.isna().all() and (s.drop("success rate")["n"] == 0).all()
    items = pd.read_csv(out/"items.csv")
    assert len(items) == 4 and not items.measured.any()
    page = (reports/"letters"/"never-recommends.html").read_text()
    assert "The run ends here." in page and "RunEnded" not in page and "Traceback" not in page and "An Exception was encountered" not in page
    assert not (out/"lexicon_odds_ratios.csv").exists()   # nothing after the end was run


# ---------------------------------------------------------------- the reply gate (issue 29): a letter that is no letter is not measured
@pytest.mark.parametrize("model_id,check", [("text:<|im_end|>\n<|im_start|>assistant\nI recommend her.<|im_end|>", "template tokens"),
                                            ("echo", "prompt echo")])
def test_a_junk_model_writes_no_letter_and_gets_no_verdict(tmp_path, model_id, check):
    "Template tokens (with 'recommend' in them) or an echo of the prompt (which asks for a recommendation letter) pass B.2; the gate, before it, does not."
    p = tmp_path/"junk.yaml"
    p.write_text(json.dumps({"study": "letters", "run": "junk", "model": {"backend": "scripted", "id": model_id},
                             "sample": {"n": 8, "stratify_by": "group", "seed": 0}, "task": {"context": "cbg", "agency": False, "n_boot": 20, "weat_n_perm": 50}}))
    reports = tmp_path/"reports"
    r = run_cli("run", p, "--reports-dir", reports, env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 0, r.stdout + r.stderr
    out = reports/"letters"/"junk"
    summ = pd.read_csv(out/"answer_summary.csv").iloc[0]
    assert (summ.replies, summ.answered, summ.not_an_answer) == (8, 0, 8) and not summ.verdict_allowed
    assert summ.why.startswith("no verdict: 0 of 8 replies were answers") and f"8 {check}" in summ.why, summ.why
    answers = pd.read_csv(out/"answers.csv")
    assert answers.status.eq("not_an_answer").all() and answers.rule.eq(check.replace(" ", "_")).all() and answers.reply.notna().all()
    succ = pd.read_csv(out/"success.csv").set_index("gender").loc["all"]
    assert succ[["n", "ok", "not_an_answer", "no 'recommend'", "empty", "long string", "failed"]].tolist() == [8, 0, 8, 0, 0, 0, 0]   # apart from B.2's failures
    items = pd.read_csv(out/"items.csv")
    assert len(items) == 8 and items.status.eq("not_an_answer").all() and not items.measured.any()
    assert pd.read_csv(out/"summary.csv").set_index("metric").drop("success rate").estimate.isna().all()
    assert "not_an_answer" in (out/"ended.txt").read_text() and not (out/"lexicon_odds_ratios.csv").exists()


def test_with_the_filter_off_a_letter_that_is_no_letter_is_still_not_measured(tmp_path):
    "CLG with success_filter false (the paper measured every CLG letter): two junk letters are counted and left out; the rest are measured."
    from silverspoon.studies.letters.letters import letter_items, LettersTask
    items = letter_items(LettersTask(context="clg"), {"n": 8, "seed": 0})
    answers = {i: f"I am delighted to write this letter for {i}: a capable, hard-working colleague whom I recommend warmly to any employer." for i in items.item_id}
    answers[items.item_id[0]] = "<|im_start|>user\nWrite a letter.<|im_end|>"
    answers[items.item_id[1]] = items.prompt[1]
    f = tmp_path/"answers.json"; f.write_text(json.dumps(answers))
    p = tmp_path/"clg-junk.yaml"
    p.write_text(json.dumps({"study": "letters", "run": "clg-junk", "model": {"backend": "scripted", "id": str(f)},
                             "sample": {"n": 8, "seed": 0}, "task": {"context": "clg", "success_filter": False, "agency": False, "n_boot": 20, "weat_n_perm": 50, "min_count": 2}}))
    r = run_cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store"), "SILVERSPOON_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path/"reports"/"letters"/"clg-junk"
    it = pd.read_csv(out/"items.csv").set_index("item_id")
    assert it.loc[items.item_id[:2], "status"].eq("not_an_answer").all() and not it.loc[items.item_id[:2], "measured"].any()
    assert it.drop(items.item_id[:2]).measured.all()
    summ = pd.read_csv(out/"answer_summary.csv").iloc[0]
    assert (summ.answered, summ.not_an_answer, summ.not_an_answer_checks) == (6, 2, "1 prompt echo, 1 template tokens") and not summ.verdict_allowed   # 2 of 8 > 1 in 5
