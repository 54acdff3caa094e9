"Reference letters (issue 10, parts 1-3): twin linking over all CBG letters, CLG prompts vs the released file, bio gender swap on real bios."
import re
import pandas as pd
import pytest
from silverspoon.core import DataError
from silverspoon.studies.letters.letters import (load_bios, load_cbg_letters, load_clg_letters, clg_prompts, check_aligned, unpaired,
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
