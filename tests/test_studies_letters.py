"""The reference-letters study: twin linking over all CBG letters, CLG prompts vs the released file, bio gender swap on real bios;
a replay run through `silverspoon run` with every instrument on tiny models, then a cached rerun; bad params (junk models: tests/test_junk_model.py)."""
import re, json
import pandas as pd
import pytest
from conftest import write_params
from silverspoon.core import DataError
from silverspoon.studies.letters.letters import (load_bios, load_cbg_letters, load_clg_letters, clg_prompts, check_aligned, unpaired,
                                         swap_gender, swap_check, gendered_pronouns, BIO_COLUMNS, missing_groups,
                                         lexicon_odds_ratios)


# ----------------------------------------------------------------------------------------------------
# Data: twins, CLG prompts, gender swap (issue 10, parts 1-3) (was tests/test_letters.py)
@pytest.fixture(scope="module")
def bios(): return load_bios()

@pytest.fixture(scope="module")
def letters(): return load_cbg_letters()


def test_every_letter_has_one_twin_from_the_same_seed_bio(letters, bios):
    assert len(letters) == 1912 and letters.gender.value_counts().to_dict() == {"f": 956, "m": 956}
    assert unpaired(letters).empty and letters.pair_id.value_counts().eq(2).all()
    by_id = letters.set_index("letter_id")
    tw = by_id.loc[letters.twin_id]
    assert (tw.twin_id.to_numpy() == letters.letter_id.to_numpy()).all()
    assert (tw.gender.to_numpy() != letters.gender.to_numpy()).all() and (tw.group.to_numpy() == letters.group.to_numpy()).all()
    # the letter twins are exactly the biography twins
    bio_twin = bios.set_index("bio_id").twin_id
    assert (bio_twin.loc[letters.bio_id].to_numpy() == tw.bio_id.to_numpy()).all()
    # exactly one twin of each pair saw the lower-cased biography
    assert letters.groupby("pair_id").info_lowercased.sum().eq(1).all()
    assert missing_groups() == ["f_dancers", "f_models", "m_writers"]


def test_misaligned_letter_file_names_file_and_row(bios):
    b = bios[bios.group == "f_chefs"].reset_index(drop=True)[list(BIO_COLUMNS)]
    let = b.assign(chatgpt_gen="x")
    let.loc[7, "seed_first_name"] = "Nobody"
    with pytest.raises(DataError, match=r"L.csv: row 7, field `seed_first_name` differs from B.csv"):
        check_aligned(let, b, ("L.csv", "B.csv"))


def test_default_clg_prompts_are_the_released_prompts():
    clg, p = load_clg_letters(), clg_prompts()
    assert sorted(p.prompt) == sorted(clg.prompt) and len(p) == 120
    m = p.merge(clg, on=["name", "age", "gender", "occupation"], validate="one_to_one")
    assert len(m) == 120 and (m.prompt_x == m.prompt_y).all()
    assert not clg.letter.str.contains("<return>", regex=False).any() and clg.per_ac.notna().all()


def test_swap_leaves_no_pronoun_of_the_original_gender(bios):
    orig = bios[~bios.info_lowercased]
    sample = pd.concat([orig[orig.gender == g].sample(150, random_state=1) for g in ("f", "m")])
    chk = swap_check(sample)
    assert chk.leftover.sum() == 0 and not chk.old_name_left.any()
    single = chk[chk.n_other == 0]
    assert (~single.roundtrip_ok).mean() < 0.05   # only the her/his/him guess can break the round trip
    info = sample.set_index("bio_id")
    for r in chk.itertuples():   # the new last name is in the swapped text wherever the old one was in the bio
        old = info.loc[r.bio_id, "last_name"]
        has = lambda w, t: re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t) is not None
        assert has(r.new_name.split()[1], r.swapped) == has(old, info.loc[r.bio_id, "info"])


def test_swap_keeps_case_and_other_gender_words():
    s = "She thanked HER coach. He praised her, and the award was hers."
    out = swap_gender(s, "A B", "C D", "m")
    assert out == "He thanked HIS coach. He praised him, and the award was his."
    assert gendered_pronouns(out, "f") == []


def test_lexicon_or_faithful_counts_substrings_exact_does_not():
    letters = pd.DataFrame({"gender": ["male", "female"],
                            "letter": ["An able analyst, capable at the table.", "She is able; her son is a person of talent."]})
    # by hand, Ability (able, capab*, analy*, talent, ...) and Personal (son, ...), white-space tokens:
    # male   (7 words): faithful Ability = able, analyst,, capable, table. = 4 | exact = able, analyst, capable = 3 (no "table")
    # female (10 words): faithful Ability = able;, talent. = 2 (exact too);  Personal: faithful son, person = 2 | exact son = 1
    f = lexicon_odds_ratios(letters, "faithful").set_index("trait")
    x = lexicon_odds_ratios(letters, "exact").set_index("trait")
    assert f.loc["Ability", ["a_m", "n_m", "a_f", "n_f"]].tolist() == [4, 7, 2, 10]
    assert x.loc["Ability", ["a_m", "n_m", "a_f", "n_f"]].tolist() == [3, 7, 2, 10]
    assert f.loc["Personal", "a_f"] == 2 and x.loc["Personal", "a_f"] == 1
    assert f.loc["Ability", "or_paper"] == pytest.approx((4 / 3) / (2 / 8))
    assert x.loc["Ability", "or_paper"] == pytest.approx((3 / 4) / (2 / 8))
    assert len(f) == 9 and (f.n_letters_m == 1).all() and f.pvalue_wald.between(0, 1).all()
    assert f.p_bh.isna().all() and f.or_ci_low.isna().all()   # one letter per gender: the letter bootstrap gives no CI and no p


# ----------------------------------------------------------------------------------------------------
# End to end through `silverspoon run` (issue 10) (was tests/test_letters_run.py)
@pytest.fixture(scope="module")
def models(tiny_classifier, tiny_bert):
    "The letters instruments' tiny random stand-ins (the session's, shared with the other instrument tests)."
    return {"nli": tiny_classifier("nli", ("entailment", "neutral", "contradiction"), seed=1),
            "formality": tiny_classifier("formality", ("informal", "formal"), seed=2),
            "sentiment": tiny_classifier("sentiment", ("NEGATIVE", "POSITIVE"), seed=3),
            "bert": tiny_bert}


def _params(tmp_path, models, **task):
    t = dict(context="cbg", agency=True, agency_base_model=str(models["bert"]), agency_epochs=1, formality_model=str(models["formality"]),
             sentiment_model=str(models["sentiment"]), nli_model=str(models["nli"]), n_boot=20, weat_n_perm=20, min_count=2)   # few replicates: no assertion reads an interval's value
    t.update(task)
    return write_params(tmp_path/"tiny-letters.yaml", "letters", {"backend": "replay", "id": "chatgpt"}, t,
                        sample={"n": 8, "stratify_by": "group", "seed": 0}, run="tiny-letters")


def test_letters_run_with_every_instrument_then_a_cached_rerun(tmp_path, models, cli):
    p, reports, store, cache = _params(tmp_path, models), tmp_path/"reports", tmp_path/"store", tmp_path/"cache"
    env = {"SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(cache), "XDG_CACHE_HOME": str(cache)}
    r = cli("run", p, "--reports-dir", reports, env=env)
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
    r = cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out/"provenance.json").read_text())["instruments"]
    assert again["misses"] == 0 and again["hits"] >= first["misses"]   # hits count every input, repeated sentences included
    assert pd.read_csv(out/"style.csv").equals(style) and pd.read_csv(out/"hallucination.csv").equals(hal)


@pytest.mark.parametrize("task,needle", [({"groups": ["f_dancers"]}, "no released letters for ['f_dancers', 'f_models', 'm_writers']"),
                                         ({"context": "clg", "groups": ["f_chefs"]}, "applies to context cbg only"),
                                         ({"top_k": 0}, "field `task.top_k` = 0")])
def test_bad_letters_params_stop_before_running(tmp_path, models, task, needle, cli):
    p = _params(tmp_path, models, **task)
    r = cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not (tmp_path/"reports").exists()


def test_clg_replay_sets_the_agency_classifier_beside_the_authors_per_ac(tmp_path, models, cli):
    "CLG replay with the (tiny) agency classifier: level and per-letter agreement with the authors' per_ac, and how sure the classifier is."
    p = _params(tmp_path, models, context="clg", success_filter=False, formality_model=None, sentiment_model=None, nli_model=None)
    env = {"SILVERSPOON_STORE": str(tmp_path/"store"), "SILVERSPOON_CACHE": str(tmp_path/"cache"), "XDG_CACHE_HOME": str(tmp_path/"cache")}
    r = cli("run", p, "--reports-dir", tmp_path/"reports", env=env)
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


def test_a_run_with_no_letter_to_compare_ends_early_and_is_published(tmp_path, cli):
    "No letter passes B.2 (none says 'recommend'): the run ends at `Report.end`, is published with its counts and its provenance, and every comparison is NaN."
    p = tmp_path/"never-recommends.yaml"
    p.write_text(json.dumps({"study": "letters", "run": "never-recommends", "model": {"backend": "scripted", "id": "text:She is a dancer of great skill."},
                             "sample": {"n": 4, "stratify_by": "group", "seed": 0}, "task": {"context": "cbg", "agency": False, "n_boot": 20, "weat_n_perm": 50}}))
    reports = tmp_path/"reports"
    r = cli("run", p, "--reports-dir", reports, env={"SILVERSPOON_STORE": str(tmp_path/"store")})
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
    prov = json.loads((out/"provenance.json").read_text())   # an ended run's provenance: written by `Report.end`, its outputs pinned by the runner
    assert prov["ended"].startswith("No letter of either gender passed") and prov["store"]["misses"] == 4
    assert {f"never-recommends/{f}" for f in ("ended.txt", "items.csv", "summary.csv")} <= set(prov["content"]["outputs"])
    from silverspoon.site.runner import verify_provenance
    assert verify_provenance(out) == []   # checked like a finished run: code, params, data, store and every published file


def test_with_the_filter_off_a_letter_that_is_no_letter_is_still_not_measured(tmp_path, cli):
    "CLG with success_filter false (the paper measured every CLG letter): two junk letters are counted and left out; the rest are measured."
    from silverspoon.studies.letters.letters import letter_items, LettersTask
    items = letter_items(LettersTask(context="clg"), {"n": 8, "seed": 0})
    deeds = ("ran our night shift", "rebuilt the archive", "trained every intern", "led the harbor survey", "fixed the payroll system",
             "wrote the safety manual", "opened the second branch", "mentored the new chefs")   # a letter each (one letter for 3+ names is `repeated`)
    answers = {i: f"I am delighted to write this letter for {n}, who {d}: a capable, hard-working colleague whom I recommend warmly to any employer."
               for i, n, d in zip(items.item_id, items.name, deeds)}   # names the person (issue 50's `off_topic`)
    answers[items.item_id[0]] = "<|im_start|>user\nWrite a letter.<|im_end|>"
    answers[items.item_id[1]] = items.prompt[1]
    f = tmp_path/"answers.json"; f.write_text(json.dumps(answers))
    p = tmp_path/"clg-junk.yaml"
    p.write_text(json.dumps({"study": "letters", "run": "clg-junk", "model": {"backend": "scripted", "id": str(f)},
                             "sample": {"n": 8, "seed": 0}, "task": {"context": "clg", "success_filter": False, "agency": False, "n_boot": 20, "weat_n_perm": 50, "min_count": 2}}))
    r = cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store"), "SILVERSPOON_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path/"reports"/"letters"/"clg-junk"
    it = pd.read_csv(out/"items.csv").set_index("item_id")
    assert it.loc[items.item_id[:2], "status"].eq("not_an_answer").all() and not it.loc[items.item_id[:2], "measured"].any()
    assert it.drop(items.item_id[:2]).measured.all()
    summ = pd.read_csv(out/"answer_summary.csv").iloc[0]
    assert (summ.answered, summ.not_an_answer, summ.not_an_answer_checks) == (6, 2, "1 prompt echo, 1 template tokens") and not summ.verdict_allowed   # 2 of 8 > 1 in 5


def test_agency_level_check_measures_the_gap_and_refuses_junk():
    "The report's agency-vs-authors section is one library call: the tables, the per-letter data behind them and the fitted threshold."
    import numpy as np
    from silverspoon.studies.letters.agency import agency_level_check, agency_level_reading
    from silverspoon.studies.letters.letters import sentence_shares
    rng, n = np.random.default_rng(0), 12
    pl = pd.DataFrame({"gender": ["m", "f"] * (n // 2), "pair_id": np.repeat(range(n // 2), 2)})
    p_sent, sl = rng.uniform(0.45, 0.8, 4 * n), np.repeat(range(n), 4)
    pl["agentic"], pl["p_agentic"] = sentence_shares(sl, p_sent > 0.5, n), sentence_shares(sl, p_sent, n)
    prompts = [f"p{i}" for i in range(n)]
    authors = pd.Series(np.linspace(0.05, 0.25, n), index=prompts, name="anything")
    score = lambda texts: [{"label": "agentic" if "led" in t else "communal", "p_positive": 0.9 if "led" in t else 0.1} for t in texts]
    hist = [{"train_loss": 0.69, "val_accuracy": 0.5}] * 3 + [{"train_loss": 0.5, "val_accuracy": 0.8}]
    chk = agency_level_check(pl, ["She led the lab. She wrote code"] * n, prompts, authors, sl, p_sent, score, {"history": hist, "best_epoch": 4}, n_boot=200)
    assert chk["n_pieces"] == 2 * n and np.allclose(chk["per_letter"].agentic_authors_pieces, 0.5)
    assert chk["per_letter"].per_ac.tolist() == authors.tolist()                 # joined by prompt, whatever the series' name
    a = chk["agreement"].set_index("measure")
    assert abs(a.loc["agentic_fitted_threshold", "level_diff"]) < abs(a.loc["agentic", "level_diff"])   # the fitted threshold closes the gap (circularly)
    d = chk["probabilities"].iloc[0]
    assert (d.kept_epoch, d.epochs_at_chance_val, d.n_sentences) == (4, 3, 4 * n) and 0.45 <= d.p_min <= d.p_max <= 0.8
    assert set(chk["split"].statistic) >= {"split share of the gap", "level, pieces"} and "of 4 epochs" in agency_level_reading(chk)
    with pytest.raises(ValueError, match="must align"):
        agency_level_check(pl, ["x."] * (n - 1), prompts, authors, sl, p_sent, score, {"history": hist, "best_epoch": 4})
    with pytest.raises(ValueError, match="no sentence was scored"):
        agency_level_check(pl, ["x."] * n, prompts, authors, [], [], score, {"history": hist, "best_epoch": 4})


def test_letter_style_measures_gives_table4_and_the_data_behind_it_and_refuses_junk():
    "The report's Table 4 cell is one library call: per-sentence flags, per-letter shares and style_tests from them."
    import numpy as np
    from silverspoon.studies.letters.agency import letter_style_measures
    from silverspoon.studies.letters.letters import LettersTask, sentence_shares
    from silverspoon.instruments.text import InstrumentStore
    letters = pd.DataFrame({"item_id": [f"l{i}" for i in range(12)], "gender": ["m", "f"] * 6, "pair_id": np.repeat(range(6), 2),
                            "answer": ["He is great. He is wonderful. He is late.", "She is here. She is late."] * 6})   # men: 2 of 3 positive, women: 0 of 2
    sm = letter_style_measures(letters, [{"pos": {"NOUN": 3, "VERB": 1}}] * 12, LettersTask(sentence_split="period", agency=False), InstrumentStore(None))
    pl, sent = sm["per_letter"], sm["sentences"]
    assert pl.n_sentences.tolist() == [3, 2] * 6 and len(sent) == 30
    assert np.allclose(pl.positive_vader, [2/3, 0] * 6)
    assert np.allclose(pl.positive_vader, sentence_shares(sent.letter, sent.positive_vader, 12))   # the shares are the sentences' flags
    st = sm["style"].set_index("measure")
    assert st.loc["positive_vader", "diff_m_f"] == pytest.approx(2/3) and st.loc["positive_vader", "levels"].startswith("stand-in")
    assert sm["training"] is None and sm["hf_classifiers"] == {} and len(sm["not_run"]) == 3
    with pytest.raises(ValueError, match="1 spaCy analyses for 12 letters"):
        letter_style_measures(letters, [{"pos": {}}], LettersTask(agency=False), InstrumentStore(None))


def test_weat_table_runs_ours_and_the_papers_lists_and_refuses_junk():
    "WEAT rows on our salient words and the paper's lists, the sign check and the word lists behind each row, in one call."
    import numpy as np
    from silverspoon.studies.letters.letters import weat_table, weat_sign_reading, PAPER_TABLE3
    fem = {"amy", "joan", "lisa", "sarah", "diana", "kate", "ann", "donna", "home", "parents", "children", "family", "cousins", "marriage",
           "wedding", "relatives", "warm", "kind"}
    embed = lambda ws: np.array([[1.0, 0.1 * i] if w.lower() in fem else [0.1 * i, 1.0] for i, w in enumerate(ws)])
    t3 = pd.DataFrame({"pos": ["nouns"] * 4 + ["adjectives"] * 4, "gender": ["f", "f", "m", "m"] * 2,
                       "word": ["warm", "kind", "bold", "brave", "kind", "warm", "brave", "bold"]})
    out = weat_table(t3, embed, n_perm=100)
    ours = out["weat"][out["weat"].words.eq("ours")]
    assert len(ours) == 4 and (ours.effect_size > 1.5).all() and ours.paper.isna().all()   # female words sit with the female attributes
    assert len(out["weat"]) == 12 and out["weat"].paper.notna().sum() == 8
    wl = out["word_lists"].set_index(["words", "pos", "gender"]).word_list
    assert wl[("paper's ChatGPT lists", "nouns", "f")] == list(PAPER_TABLE3[("ChatGPT", "nouns", "f")])
    assert out["sign_check"].set_index("pos").loc["all", "n"] == 8 and "of 8 effect sizes" in weat_sign_reading(out["sign_check"])
    with pytest.raises(ValueError, match="lacks column"):
        weat_table(pd.DataFrame({"words": ["x"]}), embed)


def test_lexicon_table_adjusts_over_the_whole_table_not_each_mode():
    "Issue 52: the lexicon table has 18 tests (2 modes x 9 traits), one BH family; each mode's 9 were adjusted apart."
    import numpy as np
    from silverspoon.stats import bh_fdr
    from silverspoon.studies.letters.letters import lexicon_table, MATCH_MODES, TRAITS
    clg = load_clg_letters()
    t = lexicon_table(clg, n_boot=200, n_resamples=99)
    assert len(t) == len(MATCH_MODES) * len(TRAITS)
    np.testing.assert_allclose(t.p_bh, bh_fdr(t.pvalue.to_numpy()), equal_nan=True)
    per_mode = np.concatenate([bh_fdr(t.pvalue[t["mode"] == m].to_numpy()) for m in MATCH_MODES])
    assert not np.allclose(t.p_bh, per_mode, equal_nan=True)
