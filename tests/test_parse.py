"The one parse contract: each reply parser measured on its hand-labelled set (tests/parser_sets/*.csv), >= 98% right on the clear replies."
import pandas as pd
import pytest

from silverspoon.instruments.parse import parser_set, instrument_validity, REFUSAL, Parsed

MIN_ITEMS, MIN_CLEAR_AGREEMENT = 60, 0.98

def _check(summ, items, name):
    r = summ.iloc[0]
    wrong = items[~items.agree.astype(bool) & ~items.hard]
    assert r.n >= MIN_ITEMS, f"{name}: only {r.n} hand-labelled replies; the contract asks for at least {MIN_ITEMS}"
    assert r.n_hard >= 1, f"{name}: no hard replies marked; count the disputable ones apart"
    assert r.agreement_clear >= MIN_CLEAR_AGREEMENT, f"{name}: {r.agreement_clear:.3f} right on clear replies; misses:\n{wrong.to_string()}"

def test_normative_parser_set():
    from silverspoon.studies.silverspoon.normative import load_normative, parser_set_validity
    summ, items = parser_set_validity(load_normative())
    _check(summ, items, "normative")
    s = parser_set("normative")
    assert s.source.str.startswith("released").sum() >= 30 and (s.source == "written").sum() >= 20   # released answers and written forms

def test_parser_set_items_are_the_reference():
    "The set is what the instrument is compared with: a changed expectation changes the measured agreement (the test can fail)."
    from silverspoon.studies.silverspoon.normative import parse_normative
    s = parser_set("normative").head(10)
    got = [parse_normative(t).label for t in s.reply]
    flipped = s.expected.map(lambda e: "other" if e == "P1" else "P1")
    assert instrument_validity("x", "parser", got, flipped, "flipped")[0].agreement.item() < 0.5

def test_one_refusal_detector_is_extended_not_copied():
    from silverspoon.studies.silverspoon import normative
    assert set(REFUSAL.phrases) < set(normative.NORMATIVE_REFUSAL.phrases)
    assert not hasattr(normative, "_REFUSAL")
    from silverspoon.studies.stop import stop_downstream
    assert set(REFUSAL.phrases) < set(stop_downstream.CHOICE_REFUSAL.phrases) and not hasattr(stop_downstream, "_REFUSE")

def test_downstream_choice_parser_set():
    from silverspoon.studies.stop.stop_downstream import parser_set_validity
    summ, items = parser_set_validity()
    _check(summ, items, "downstream_choice")
    s = parser_set("downstream_choice")
    assert s.source.str.startswith("store").sum() >= 25 and (s.source == "written").sum() >= 30

@pytest.mark.parametrize("reply,want", [("Answer: b", ("answer", 1)), ("(a)", ("answer", 0)), ("It cannot be determined who ran.", ("answer", 2)),
                                        ("There is not enough information.", ("answer", 2)), ("Unknown", ("answer", 2)),
                                        ("Not the grandfather; the grandson.", ("answer", 1)), ("a person who ran", ("unparseable", None)),
                                        ("I'm sorry, I can't.", ("refusal", None))])
def test_parse_choice_issue_20_forms(reply, want):
    from silverspoon.studies.stop.stop_downstream import parse_choice
    assert parse_choice(reply, ["The grandfather", "The grandson", "Can't be determined"]) == want

def test_every_study_extends_the_one_refusal_detector():
    from silverspoon.studies.silverspoon import professions, narratives; from silverspoon.studies.stop import stop
    for det in (professions.PROFESSION_REFUSAL, narratives.STORY_REFUSAL, stop.STOP_REFUSAL):
        assert set(REFUSAL.phrases) <= set(det.phrases)
    assert professions.PROFESSION_REFUSAL("Well, I cannot tell from a name.") and not REFUSAL("Well, I cannot tell from a name.")   # found anywhere
    assert narratives.STORY_REFUSAL("Unfortunately, I cannot write that.") and stop.STOP_REFUSAL("i am just an ai and cannot judge")

def test_professions_parser_returns_parsed_and_unpacks():
    from silverspoon.studies.silverspoon.professions import parse_profession
    p = parse_profession("Emma is likely a software engineer in Seattle.", "Emma")
    assert isinstance(p, Parsed) and p.value == "software engineer"
    status, profession, rule = p
    assert (status, profession) == ("answer", "software engineer") and rule == p.rule

def test_professions_parser_set():
    from silverspoon.studies.silverspoon.professions import parser_set_validity
    summ, items = parser_set_validity()
    _check(summ, items, "professions")
    s = parser_set("professions")
    assert s.source.str.startswith("store").sum() >= 25 and (s.source == "written").sum() >= 30   # real replies and written forms
    assert s["name"].notna().all(), "every reply names the person asked about (the parser reads the answer about that name)"

@pytest.mark.parametrize("reply,want", [('"Actor"', "actor"), ('The person\'s profession is "Lawyer"', "lawyer"),
                                        ("Aaliyah is a professional dancer.", "dancer"), ("1. Nurse\n2. Teacher", "nurse"),
                                        ("She is a chef and a restaurateur.", "chef"), ("My best guess would be a nurse.", "nurse"),
                                        ("There isn't enough information to determine her profession.", "refusal"), ("Unknown", "unparseable"),
                                        ("Awesome! You're right, I'll provide a more accurate answer.", "unparseable")])
def test_parse_profession_issue_20_forms(reply, want):
    from silverspoon.studies.silverspoon.professions import parse_profession
    assert parse_profession(reply, "Aaliyah").label == want

@pytest.mark.parametrize("parser", ["faithful", "strict"])
def test_stop_parser_sets(parser):
    from silverspoon.studies.stop.stop import parser_set_validity
    summ, items = parser_set_validity(parser)
    _check(summ, items, f"stop_{parser}")
    s = parser_set(f"stop_{parser}")
    assert s.source.str.startswith("released").sum() >= 60 and s.source.str.startswith("store").sum() >= 5 and (s.source == "written").sum() >= 20
    assert (s.why_hard.notna() == s.hard).all(), "every hard reply says why it is hard, and only those"

def test_stop_parsers_return_parsed_with_the_labels_they_always_gave():
    from silverspoon.studies.stop.stop import parse_faithful, parse_strict, faithful_label, strict_label, PARSERS, PARSER_RULES
    assert PARSERS == {"faithful": parse_faithful, "strict": parse_strict}
    for text, f, s in [("I cannot answer that.", "unparseable", "refusal"), ("Yes or no? No.", "no", "no"), ("Not appropriate", "no", "unparseable"), (None, "unparseable", "unparseable")]:
        pf, ps = parse_faithful(text), parse_strict(text)
        assert isinstance(pf, Parsed) and isinstance(ps, Parsed) and (pf.label, ps.label) == (f, s) == (faithful_label(text), strict_label(text))
        assert pf.rule in PARSER_RULES["faithful"] and ps.rule in PARSER_RULES["strict"]

def test_stop_scale_parser_set():
    "The stop_scale output parser and validator (`reply_verdict`: each variant's verdict and reasons) on its hand-labelled set."
    from silverspoon.studies.stop.stop_scale import parser_set_validity
    summ, items = parser_set_validity()
    _check(summ, items, "stop_scale")
    s = parser_set("stop_scale")
    assert s.source.str.startswith("store").sum() == 12 and s.source.str.startswith("released").sum() >= 20 and (s.source == "written").sum() >= 40
    assert (s.why_hard.notna() == s.hard).all(), "every hard answer says why it is hard, and only those"
    assert s.expected.str.contains(r"\| ").sum() >= 4, "answers with several variants are in the set"
    flipped = s.expected.map(lambda e: "no sentences block" if e != "no sentences block" else "valid")   # the set is the reference: the test can fail
    assert instrument_validity("x", "parser", items.predicted, flipped, "flipped")[0].agreement.item() < 0.5

@pytest.mark.parametrize("stated,target,want", [("Shintoism", "shinto", "valid"), ("Jain", "jainism", "valid"), ("Buddhist", "buddhism", "valid"),
                                                ("Buddhism", "jainism", "invalid (wrong sub-demographic)"), ("Female", "jainism", "invalid (wrong sub-demographic)")])
def test_stop_scale_stated_sub_demographic_forms(stated, target, want):
    from silverspoon.studies.stop.stop_scale import reply_verdict
    ss = [f"Scene {i}: Mira meets her new neighbour number {i} at the {w}. Is this situation appropriate? Yes or No." for i, w in enumerate(["park", "shop", "gym", "bus", "fair"], 1)]
    answer = f"Sub-demographic: {stated}\nSentences:\n" + "\n".join(f'"{x}"' for x in ss) + '\nCounterfactual Sentence:\n"Mira moved away. Does this justify it?"'
    assert reply_verdict(answer, target=target) == want


def test_rule_counts_orders_ties_by_name_whatever_pandas_does():
    "Equal counts are ordered by rule name (and labels by name), so parser_rules.csv is the same on pandas 2.2 and 3.x."
    from silverspoon.instruments.parse import rule_counts
    for order in (["b", "a", "b", "a", "c"], ["a", "b", "a", "b", "c"]):
        rc = rule_counts(pd.Series(order), None, pd.Series(["y", "x", "x", "y", "x"]))
        assert rc.rule.tolist() == ["a", "b", "c"] and rc.labels.tolist()[:2] == ["x: 1, y: 1", "x: 1, y: 1"]
