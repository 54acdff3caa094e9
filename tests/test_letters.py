"Reference letters (issue 10, parts 1-3): twin linking over all CBG letters, CLG prompts vs the released file, bio gender swap on real bios."
import re
import pandas as pd
import pytest
from silverspoon.core import DataError
from silverspoon.studies.letters import (load_bios, load_cbg_letters, load_clg_letters, clg_prompts, check_aligned, unpaired,
                                         swap_gender, swap_check, gendered_pronouns, BIO_COLUMNS, missing_groups,
                                         lexicon_odds_ratios)


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


def test_agency_level_check_measures_the_gap_and_refuses_junk():
    "The report's agency-vs-authors section is one library call: the tables, the per-letter data behind them and the fitted threshold."
    import numpy as np
    from silverspoon.studies.letters import agency_level_check, agency_level_reading, sentence_shares
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
    from silverspoon.studies.letters import letter_style_measures, LettersTask, sentence_shares
    from silverspoon.text import InstrumentStore
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
    from silverspoon.studies.letters import weat_table, weat_sign_reading, PAPER_TABLE3
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
