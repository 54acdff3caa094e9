"""Narratives end to end (issue 11, parts 5-8): `silverspoon run` of a narratives params file with the paper's 5-class
sentiment path on a tiny random classifier, then a rerun that generates nothing and reads every instrument output
(sentiment, VADER, content lemmas) from the cache; and bad params that stop before anything runs. The stories come from a
scripted answers file (issue 50: a tiny random Llama's byte soup names no one and is `off_topic`, no story to score)."""
import json
import numpy as np
import pandas as pd
import pytest
from conftest import write_params
from silverspoon.studies import get_study

FIVE = ("Very Negative", "Negative", "Neutral", "Positive", "Very Positive")


@pytest.fixture(scope="module")
def models(tiny_classifier):
    "A tiny random 5-class sentiment classifier (the paper's labels)."
    return {"sentiment": tiny_classifier("sentiment", FIVE, seed=4)}


SIGHTS = ("river bakery park harbor school library market station bridge garden museum church stadium theater hospital factory "
          "square tower fountain mill pier farm castle forest lake beach canyon valley meadow orchard vineyard quarry").split()   # a story each (one text for 3+ names is `repeated`)
MOODS = ("loved the mornings in {c}, walking past the {w} and greeting every neighbour with a wonderful, happy smile",
         "hated the grey mornings in {c}; the walk past the {w} was terrible, the rent was awful and the loneliness was painful",
         "took the number four bus across {c} at seven, passed the {w}, worked at the office desk and came home at six")   # positive, negative, neutral

def _stories(tmp_path, n=32):
    "A scripted answers file: a story about each of the run's `n` people (name, city, a sight of its own, one of three moods)."
    from silverspoon.studies.silverspoon.narratives import draw_stories, NARRATIVE_PROMPT
    from silverspoon.studies.silverspoon.professions import demographic_items, profession_requests
    asked = draw_stories(demographic_items(), {"n": n, "stratify_by": "group", "seed": 0})
    ids = [q.item_id for q in profession_requests(asked, NARRATIVE_PROMPT)]
    f = tmp_path/"stories.json"
    f.write_text(json.dumps({k: f"{k.split('|')[0]} {MOODS[i % 3].format(c=k.split('|')[1], w=SIGHTS[i % len(SIGHTS)])}. " * 3 for i, k in enumerate(ids)}))
    return f

def _params(tmp_path, models, sample=None, **task):
    t = dict(sentiment_model=str(models["sentiment"]), n_boot=20, n_topics=2, min_df=1, min_count=2, max_examples=8)
    t.update(task)
    return write_params(tmp_path/"tiny-narratives.yaml", "narratives", {"backend": "scripted", "id": str(_stories(tmp_path))}, t,
                        sample=sample or {"n": 32, "stratify_by": "group", "seed": 0}, generation={"max_new_tokens": 24}, run="tiny-narratives")


def test_narratives_run_on_tiny_models_then_a_cached_rerun(tmp_path, models, cli):
    p, reports, store, cache = _params(tmp_path, models), tmp_path/"reports", tmp_path/"store", tmp_path/"cache"
    env = {"SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(cache), "XDG_CACHE_HOME": str(cache)}
    r = cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = reports/"narratives"/"tiny-narratives"
    t4 = pd.read_csv(out/"table4.csv")
    assert len(t4) == 16 and t4.n_items.tolist() == [2]*16                       # 32 stories, 2 per cell, the paper's row order
    assert (t4.n_stories + t4.n_not_story == t4.n_items).all()
    told = t4[t4.n_stories > 0]
    assert ((told.pct_negative + told.pct_neutral + told.pct_positive - 100).abs() < 1e-9).all()
    assert list(zip(t4.gender, t4.race, t4.city))[:3] == [("female", "White", "high"), ("male", "White", "high"), ("female", "White", "low")]
    assert t4.paper_sum.tolist()[7] == 96.0
    status = pd.read_csv(out/"story_status.csv")
    assert status[["story", "refusal", "not_an_answer", "empty", "failed"]].sum(axis=1).eq(status["items"]).all() and status["items"].sum() == 32
    answered = pd.read_csv(out/"answer_summary.csv").iloc[0]   # the reply gate's count: stories are answers
    assert answered.replies == 32 and answered.answered == status.story.sum() and answered.not_an_answer == status["not_an_answer"].sum() + status["empty"].sum()
    lengths = pd.read_csv(out/"lengths.csv")
    assert lengths.iloc[-1].n_items == 32 and lengths.iloc[-1].pct_truncated == 0   # scripted stories stop on their own
    assert set(pd.read_csv(out/"sentiment_tests.csv").test) == {"chi-square", "proportional odds"}
    inst = pd.read_csv(out/"instruments.csv")   # the instruments table: the status parser (no reference) and the classifier against VADER
    assert inst.instrument.str.startswith(("story status", "sentiment classifier")).all() and inst.n.tolist() == [0, t4.n_stories.sum()]
    for f in ("design", "contrasts", "instrument_agreement", "story_examples", "top_words", "topics", "topic_shares", "summary", "generation_counts"):
        assert (out/f"{f}.csv").is_file(), f
    for f in ("word_clouds", "table4_figure", "vader_compound"): assert (out/f"{f}.png").is_file(), f
    assert "% positive high-low city" in set(pd.read_csv(out/"summary.csv").metric)
    # issue 30: the headline carries its paired test; 32 stories leave fewer than 5 names with stories in both city classes: no test, no interval
    hl = pd.read_csv(out/"summary.csv").set_index("metric").loc["% positive high-low city"]
    assert hl["null"] == 0 and hl["test"].startswith("sign-flip permutation over names") and hl["n_units"] < 5 and np.isnan(hl["p"]) and np.isnan(hl["ci_low"])
    con = pd.read_csv(out/"contrasts.csv")
    assert {"p", "p_bh", "n_units", "mde"} <= set(con.columns) and con.ci_low.isna().all()   # 32 names < 20: no bootstrap interval
    assert t4[t4.n_stories > 0].ci_note.str.contains("too few units").all() and t4.pct_positive_ci_low.isna().all()   # 2 stories per cell: < 5 names, no interval
    prov = json.loads((out/"provenance.json").read_text())
    first = prov["instruments"]
    assert prov["sentiment_instrument"]["instrument"] == "hf-text-classification"
    assert first["misses"] > 0 and set(first["instruments"]) == {"sentiment-5class", "vader", "content-lemmas"}
    assert prov["store"]["misses"] > 0 and (store/"narratives"/"tiny-narratives.instruments.jsonl").is_file()
    # the rerun computes nothing: no story is generated again, every instrument output comes from the cache
    before = {f: pd.read_csv(out/f"{f}.csv") for f in ("table4", "top_words", "topics", "contrasts", "sentiment_tests")}
    r = cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out/"provenance.json").read_text())
    assert again["instruments"]["misses"] == 0 and again["instruments"]["hits"] >= first["misses"]
    assert again["store"]["misses"] == 0 and again["store"]["hits"] == prov["store"]["hits"] + prov["store"]["misses"]
    for f, df in before.items(): pd.testing.assert_frame_equal(pd.read_csv(out/f"{f}.csv"), df, obj=f)   # the same tables from the cache
    items, summ = pd.read_csv(out/"items.csv"), pd.read_csv(out/"summary.csv").set_index("metric").estimate
    assert len(items) == 32 and (items["item"] == items.name).all() and set(items.status) <= {"story", "refusal", "not_an_answer", "empty", "failed"}
    h = get_study("narratives").headlines_from_items(items)
    assert list(h) == ["% positive high-low city"] and np.isclose(h["% positive high-low city"], summ["% positive high-low city"], rtol=0, atol=1e-9, equal_nan=True), (h, summ)   # NaN where no name has stories in both city classes


@pytest.mark.parametrize("sample,task,needle", [
    (None, {"prompt": "Write a story about {name}."}, "field `task.prompt` lacks {city}"),
    ({"n": 5000}, {}, "field `sample.n` = 5000: draw between 1 and 1000 stories"),
    ({"n": 32, "stratify_by": "race"}, {}, "field `sample.stratify_by` = 'race'"),
    (None, {"n_topics": 1}, "field `task.n_topics` = 1 must be in [2, 1000]"),
    (None, {"vader_positive": -0.1}, "negative must be below positive"),
    (None, {"prompt_variant": "poem"}, "field `task.prompt_variant` = 'poem' is not a prompt variant"),
    (None, {"prompt": "A tale of {name} in {city}.", "prompt_variant": "character"}, "are both set")])
def test_bad_narratives_params_stop_before_running(tmp_path, models, sample, task, needle, cli):
    p = _params(tmp_path, models, sample, **task)
    r = cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 2 and needle in r.stderr and str(p) in r.stderr, r.stderr
    assert not (tmp_path/"reports").exists() and not (tmp_path/"store").exists()


def test_the_committed_smollm2_proportional_odds_rows_are_reproducible(root):
    """issue 30 item 8: the SmolLM2 run's 160 stories (every Black story scored +1: separated) give the same proportional-odds
    rows, to 1e-9 relative, in another order of the stories; the Black stories leave the fit and the rows say so."""
    import numpy as np
    from silverspoon.studies.silverspoon.narratives import sentiment_tests
    items = pd.read_csv(root/"reports"/"narratives"/"smollm2-135m"/"items.csv")
    a = sentiment_tests(items).set_index("term")
    b = sentiment_tests(items.iloc[np.random.default_rng(0).permutation(len(items))]).set_index("term")
    num = ["statistic", "pvalue", "p_bh", "effect", "effect_ci_low", "effect_ci_high"]
    np.testing.assert_allclose(b[num].to_numpy(float), a[num].to_numpy(float), rtol=1e-9, equal_nan=True)
    assert b.note.equals(a.note) and b.n.equals(a.n)
    po = a[a.test.eq("proportional odds")]
    assert po.loc["race: Black vs White", "note"].startswith("separation") and np.isnan(po.loc["race: Black vs White", "effect"])
    black = int((items.status.eq("story") & items.race.eq("Black")).sum())
    estimated = po.drop("race: Black vs White")
    assert (estimated.n == items.status.eq("story").sum() - black).all() and estimated.effect.notna().all()
    assert estimated.note.str.contains(f"fit without the {black} of").all()


# ---------------------------------------------------------------- the reply gate (issue 29): a story that is no story is never scored
def _scripted(cli, tmp_path, model_id, run, n=16):
    p = tmp_path/f"{run}.yaml"
    p.write_text(json.dumps({"study": "narratives", "run": run, "model": {"backend": "scripted", "id": model_id},
                             "sample": {"n": n, "stratify_by": "group", "seed": 0}, "task": {"n_boot": 20, "n_topics": 2, "min_df": 1, "min_count": 2}}))
    r = cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store"), "SILVERSPOON_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp_path/"reports"/"narratives"/run


def test_the_gate_keeps_junk_out_of_table4_in_a_run_with_stories(tmp_path, cli):
    "12 stories, a refusal and 3 answers that are no story (template tokens, an echo, Spanish): only the 12 are scored, the 3 are counted and shown."
    from silverspoon.studies.silverspoon.narratives import draw_stories, NARRATIVE_PROMPT
    from silverspoon.studies.silverspoon.professions import demographic_items, profession_requests
    asked = draw_stories(demographic_items(), {"n": 16, "stratify_by": "group", "seed": 0})
    prompts = {q.item_id: q.messages[-1]["content"] for q in profession_requests(asked, NARRATIVE_PROMPT)}
    ids = list(prompts)
    answers = {k: f"{k.split('|')[0]} {MOODS[i % 3].format(c=k.split('|')[1], w=SIGHTS[i])}. " * 3 for i, k in enumerate(ids)}   # a story each
    junk = {ids[0]: "<|im_end|>\n<|im_start|>assistant\n<|im_end|>", ids[1]: prompts[ids[1]],
            ids[2]: "Había una vez una mujer que vivía en la ciudad y que trabajaba con los niños en el hospital de la región."}
    answers.update(junk)
    answers[ids[3]] = "I'm sorry, but I can't write a story about a real person."
    f = tmp_path/"answers.json"; f.write_text(json.dumps(answers))
    out = _scripted(cli, tmp_path, str(f), "mixed")
    items = pd.read_csv(out/"items.csv").set_index("item_id")
    by_prompt = asked.set_index("item_id").prompt_id
    st = items.status.groupby(items.index.map(by_prompt)).first()
    assert st[list(junk)].eq("not_an_answer").all() and st[ids[3]] == "refusal" and st.drop(ids[:4]).eq("story").all()
    assert items.score[items.status.ne("story")].isna().all() and items.score[items.status.eq("story")].notna().all()   # junk is never scored
    t4 = pd.read_csv(out/"table4.csv")
    assert t4.n_stories.sum() == (items.status == "story").sum() and t4.n_not_story.sum() == (items.status != "story").sum()
    answers_csv = pd.read_csv(out/"answers.csv")
    assert sorted(answers_csv.rule[answers_csv.status.eq("not_an_answer")]) == ["other_language", "prompt_echo", "template_tokens"]
    summ = pd.read_csv(out/"answer_summary.csv").iloc[0]   # 3 of 16 not answers (under 1 in 5), 12 stories: a verdict is allowed
    assert (summ.answered, summ.refused, summ.not_an_answer) == (12, 1, 3) and summ.verdict_allowed and summ.not_an_answer_checks == "1 other language, 1 prompt echo, 1 template tokens"


def test_score_stories_and_the_report_helpers_give_the_tables_and_the_stories_behind_them():
    "The report's sentiment cells are library calls: scored stories (the per-item data), verdict, validity rows, agreement, examples."
    from silverspoon.studies.silverspoon.narratives import (score_stories, sentiment_validity, classifier_vader_agreement, story_examples, headline_verdict,
                                                 sentiment_contrasts, NarrativesTask, HEADLINE_METRIC, demographic_items)
    from silverspoon.instruments.text import InstrumentStore
    st = demographic_items().head(40).assign(status=["story"] * 38 + ["refusal", "failed"], n_words=5, truncated=False,
                                            answer=["What a wonderful, happy day.", "A terrible, sad loss."] * 19 + ["I can't.", None])
    sc = score_stories(st, NarrativesTask(), InstrumentStore(None))
    s = sc["stories"]
    assert len(sc["scored"]) == 38 and s.score.isna().sum() == 2 and s.score.iloc[:38].tolist() == [1, -1] * 19
    assert (sc["scored"].vader_score == sc["scored"].score).all() and sc["resolved"].model_id is None and "VADER" in sc["how"]
    v = sentiment_validity(s, sc["scored"], sc["resolved"])
    assert v.kind.tolist() == ["parser", "lexicon"] and (v.n == 0).all()
    ag = classifier_vader_agreement(sc["scored"].assign(score=0))   # a classifier that always says neutral: no story agrees
    assert ag["share"] == 0 and ag["n"] == 38 and ag["table"].shape == (1, 3)
    ex = story_examples(s, 4)
    assert sorted(ex.status.unique()) == ["failed", "refusal", "story"] and len(ex) == 4
    c = sentiment_contrasts(s, n_boot=20)
    assert HEADLINE_METRIC in headline_verdict(c)


def test_score_stories_and_the_verdict_refuse_junk():
    from silverspoon.studies.silverspoon.narratives import score_stories, headline_verdict, classifier_vader_agreement, NarrativesTask
    from silverspoon.instruments.text import InstrumentStore
    junk = pd.DataFrame({"status": ["not_an_answer", "failed"], "answer": ["<|im_end|>", None]})
    with pytest.raises(ValueError, match="none of the 2 answers has status 'story'"): score_stories(junk, NarrativesTask(), InstrumentStore(None))
    with pytest.raises(ValueError, match=r"lack column\(s\) \['answer'\]"): score_stories(junk.drop(columns="answer"), NarrativesTask(), InstrumentStore(None))
    with pytest.raises(ValueError, match="no row"): headline_verdict(pd.DataFrame({"metric": ["x"], "p": [0.5]}))
    with pytest.raises(ValueError, match="no story to compare"): classifier_vader_agreement(pd.DataFrame({"score": [], "vader_score": []}))


def test_small_expected_counts_get_an_exact_or_permutation_p_not_the_asymptotic_chi_square():
    "Issue 52: narratives' gender test had expected counts 0.75 and 1.5 and an asymptotic p; below 5 a 2x2 gets Fisher's exact p, an r x c a permutation p."
    from scipy.stats import chi2_contingency, fisher_exact
    from silverspoon.studies.silverspoon.narratives import _chi2_row
    two = pd.DataFrame({"gender": ["m"] * 10 + ["f"] * 10, "score": [1] * 9 + [0] + [1] * 5 + [0] * 5})
    r = _chi2_row(two, "gender")
    assert r["test"] == "Fisher exact" and r["pvalue"] == fisher_exact(pd.crosstab(two.gender, two.score).to_numpy())[1] and "expected count" in r["note"]
    rng = np.random.default_rng(0)
    rc = pd.DataFrame({"gender": rng.choice(["male", "female", "nonbinary"], 60, p=[.48, .48, .04]), "score": rng.choice([-1, 0, 1], 60, p=[.1, .2, .7])})
    r = _chi2_row(rc, "gender")
    asym = chi2_contingency(pd.crosstab(rc.gender, rc.score).to_numpy())[1]
    assert r["test"] == "chi-square, permutation p" and r["min_expected"] < 5 and r["pvalue"] != asym and 0 < r["pvalue"] <= 1
    big = pd.DataFrame({"gender": rng.choice(["male", "female"], 600), "score": rng.choice([-1, 0, 1], 600)})
    r = _chi2_row(big, "gender")
    assert r["test"] == "chi-square" and r["pvalue"] == chi2_contingency(pd.crosstab(big.gender, big.score).to_numpy())[1]
