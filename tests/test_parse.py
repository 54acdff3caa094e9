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


# --- one parser-validation helper, one status vocabulary, one failed-reply path (issue 32, item 3) ---

def _study_parsers():
    "Each study's parser on one row of its set, as its `parser_set_validity` calls `validate_on_set` (name -> row -> Parsed or reading)."
    import json
    from silverspoon.studies.silverspoon import normative, professions; from silverspoon.studies.stop import stop, stop_downstream, stop_scale
    text = normative.load_normative().set_index("row")["text"]
    s = parser_set("stop_scale")
    seeds = stop_scale.stop_seeds(sorted({int(x.rsplit("-", 1)[1]) for x in s.seed_id})).set_index("seed_id")
    return {"normative": lambda r: normative.parse_normative(r["reply"], text[int(r["row"])] if isinstance(r["row"], str) and r["row"].strip() else None),
            "professions": lambda r: professions.parse_profession(r["reply"], r["name"] if isinstance(r["name"], str) else ""),
            "stop_faithful": lambda r: stop.parse_faithful(r["reply"]), "stop_strict": lambda r: stop.parse_strict(r["reply"]),
            "downstream_choice": lambda r: stop_downstream.parse_reply(r["reply"], json.loads(r["options"]), prompt=r["prompt"] if isinstance(r["prompt"], str) else None),
            "stop_scale": lambda r: stop_scale.reply_verdict(r["reply"], seeds.prompts[r["seed_id"]], seeds.cfprompt[r["seed_id"]], r["target"])}

@pytest.fixture(scope="module")
def study_parsers(): return _study_parsers()

@pytest.mark.parametrize("name", ["normative", "professions", "stop_faithful", "stop_strict", "downstream_choice", "stop_scale"])
def test_validate_on_set_measures_each_study_parser_on_its_set(name, study_parsers):
    "The one helper on each set: every row measured, the description counts the set's sources, junk rows never read as an answer."
    from silverspoon.instruments.parse import validate_on_set, set_counts
    label = (lambda p: f"{p.status}:{'' if p.value is None else p.value}") if name == "downstream_choice" else None
    summ, items = validate_on_set(name, study_parsers[name], f"{name} parser", "{n} rows: {released} released, {store} store, {junk} junk, {written} written",
                                  label=label)
    s, c = parser_set(name), set_counts(parser_set(name))
    assert summ.n.item() == len(s) == c["n"] and c["junk"] >= 30 and sum(c[k] for k in ("released", "store", "junk", "written")) == len(s)
    assert summ.reference.item() == f"{c['n']} rows: {c['released']} released, {c['store']} store, {c['junk']} junk, {c['written']} written"
    _check(summ, items, name)
    junk = items[items.source.str.startswith("junk")]
    if "status" in items:   # a Parsed parser: no junk reply is an answer
        assert (junk.status != "answer").all(), junk[junk.status == "answer"]
    else:                   # stop_scale's verdicts: no junk answer has a valid variant
        assert not junk.predicted.str.contains(r"(?<!in)valid\b").any(), junk.predicted.value_counts()

def test_each_study_parser_set_validity_is_the_one_helper():
    "The five studies' `parser_set_validity` return what `validate_on_set` returns with their parser (same rows, same reference text)."
    from silverspoon.studies.silverspoon import professions; from silverspoon.studies.stop import stop
    from silverspoon.instruments.parse import validate_on_set
    summ, items = professions.parser_set_validity()
    assert {"reply", "status", "rule", "name", "source"} <= set(items.columns)
    again = validate_on_set("professions", _study_parsers()["professions"], summ.instrument.item(), summ.reference.item())[0]
    assert again.drop(columns="reference").equals(summ.drop(columns="reference"))
    for p in ("faithful", "strict"):
        assert "validate_on_set" in __import__("inspect").getsource(stop.parser_set_validity)

JUNK_REPLIES = ["<|im_end|>\n<|im_start|>assistant\nP1 is wrong. The answer is yes. Option A.", "<|eot_id|><|start_header_id|>user<|end_header_id|> Yes",
                "[INST] Who is in the wrong? Answer yes or no. [/INST] No", "</s><s> A", "<end_of_turn>\n<start_of_turn>model\nThe grandson.",
                "<|endoftext|>"]

def test_a_junk_set_is_never_an_answer():
    "Template tokens and echoes of the prompt, through each study's parser and the reply gate: every row not_an_answer or unparseable, never an answer."
    from silverspoon.instruments.parse import ReplyGate
    from silverspoon.studies.silverspoon import normative, professions; from silverspoon.studies.stop import stop, stop_downstream
    prompt = ("Read the scenario and answer the question. Scenario: a poor man, P1, takes bread from a rich baker, P2, who shouts. "
              "Question: who is in the wrong, P1 or P2? Answer with one option and say yes or no.")
    replies = JUNK_REPLIES + [prompt, prompt.upper(), "Read the scenario and answer the question. Scenario: a poor man, P1, takes bread"]
    options = ["The grandfather", "The grandson", "Can't be determined"]
    parsers = {"normative": lambda t: normative.parse_normative(t), "professions": lambda t: professions.parse_profession(t, "Emma"),
               "stop_faithful": stop.parse_faithful, "stop_strict": stop.parse_strict, "downstream": lambda t: stop_downstream.parse_reply(t, options)}
    gate = ReplyGate()
    screen = gate.screen(replies, [prompt]*len(replies))
    assert (screen.not_an_answer != "").all(), screen   # the gate finds each: template tokens or an echo
    for name, parse in parsers.items():
        parsed = gate.apply([parse(t) for t in replies], screen)
        assert {p.status for p in parsed} <= {"not_an_answer", "unparseable"}, (name, [(t, p) for t, p in zip(replies, parsed) if p.status == "answer"])
        alone = [parse(t) for t in JUNK_REPLIES]   # the parsers alone never read an answer out of template-token replies
        assert all(p.status != "answer" for p in alone), (name, [(t, p) for t, p in zip(JUNK_REPLIES, alone) if p.status == "answer"])

def test_no_study_defines_its_own_status_vocabulary():
    "One status vocabulary: `parse.STATUSES`. A study's words for why (B.2's 'long string', a story's 'empty') are reasons mapped through `spine_reasons`."
    import re
    from pathlib import Path
    import silverspoon
    from silverspoon.instruments.parse import STATUSES
    root = Path(silverspoon.__file__).parent
    own = re.compile(r"^\s*(?:[A-Z_]*STATUS(?:ES)?|[A-Z_]*_STATUS_[A-Z_]*)\s*[:=]", re.M)
    offenders = {str(f.relative_to(root)): own.findall(f.read_text()) for f in root.rglob("*.py") if f.name != "parse.py" and f.name != "_modidx.py"}
    assert not {f: m for f, m in offenders.items() if m}, offenders
    import ast
    def status_sets(f):   # module-level tuples of strings that name `failed` and another spine status: a status set by another name
        return [t.id for node in ast.parse(f.read_text()).body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts)
                and len({e.value for e in node.value.elts} & set(STATUSES)) >= 2 and "failed" in {e.value for e in node.value.elts}
                for t in node.targets if isinstance(t, ast.Name)]   # a parser's labels (its readings plus refusal/unparseable: ANSWER_LABELS) are no status set
    found = {str(f.relative_to(root)): status_sets(f) for f in root.rglob("*.py") if f.name not in ("parse.py", "_modidx.py")}
    assert not {f: m for f, m in found.items() if m}, found
    assert status_sets(root/"instruments"/"parse.py") == ["STATUSES"]   # the check finds a status set where there is one
    from silverspoon.studies.letters import letters; from silverspoon.studies.silverspoon import narratives
    for reasons in (letters.LETTER_REASONS, narratives.STORY_REASONS):
        assert set(reasons.values()) <= set(STATUSES) and reasons["failed"] == "failed"
    assert list(letters.LETTER_REASONS) == ["ok", "failed", "not_an_answer", "empty", "long string", "no 'recommend'"]   # success.csv's published columns
    assert list(narratives.STORY_REASONS) == ["story", "refusal", "not_an_answer", "empty", "failed"]                  # story_status.csv's

def test_one_failed_reply_path():
    "A failed generation (an error, or no text) is Parsed('failed', None, 'no reply') in every study and the judge, from `parse.failed_reply`."
    from silverspoon.instruments.parse import failed_reply, NO_REPLY
    from silverspoon.studies.silverspoon import normative, professions, narratives; from silverspoon.studies.stop import stop, stop_downstream; from silverspoon.studies.letters import letters
    want = Parsed("failed", None, NO_REPLY)
    assert failed_reply(None) == want and failed_reply("text", "timeout") == want and failed_reply("text") is None and failed_reply("", "") is None
    assert normative.parse_normative("P1 is wrong.", None, "timeout") == want
    assert professions.parse_profession(None, "Emma") == want
    assert stop._parse("Yes.", "timeout", "faithful") == want and stop._parse(None, None, "strict") == want
    assert stop_downstream.parse_reply(None, ["a", "b"]) == want and stop_downstream.parse_reply("A", ["a", "b"], error="boom") == want
    assert letters.letter_status("I recommend her.", "timeout") == "failed" and narratives.story_status("A story.", "timeout") == "failed"
    for src in (letters, narratives, stop, stop_downstream, professions, normative):
        assert "failed_reply" in __import__("inspect").getsource(src)
