"""Normative (issue 29): a verdict only where the model answered. The parser alone refuses junk (template tokens, prompt
echoes, story continuations, random words), the reply gate screens every reply before parsing, and a scripted junk model
run through `silverspoon run` gets no verdict, with the reason; the released answers and the committed SmolLM2 replies
pass the gate, so the paper's Table 2 (60/60) and the committed run's labels stand."""
import json
import numpy as np
import pandas as pd
import pytest
from conftest import run_cli, ROOT
from silverspoon.instruments.parse import parser_set
from silverspoon.studies.silverspoon.normative import (RELEASED_MODELS, PAPER_PROMPT_STYLE, PAPER_ROWS, PAPER_TABLE2, GOLDS, load_normative,
                                           normative_requests, render_prompt, parse_normative, parse_answers, screen_replies,
                                           answer_counts, binarize, table2, headlines_from_items)

HEADLINES = ["CKC lower-end", "CKC upper-end", "share favouring underprivileged", "CKC lower-upper", "share favouring underprivileged - annotators"]


@pytest.fixture(scope="module")
def data(): return load_normative()


def _junk_rows():
    s = parser_set("normative")
    return s[s.source.str.startswith("junk")]


def test_the_parser_set_holds_every_kind_of_junk():
    j = _junk_rows()
    assert len(j) >= 30 and j.expected.eq("unparseable").all()
    for kind in ("template", "prompt echo", "story continuation", "random word"):
        assert j.source.str.contains(kind).sum() >= 4, kind


@pytest.mark.parametrize("kind", ["template", "prompt echo", "story continuation", "random word"])
def test_the_parser_alone_refuses_each_kind_of_junk(data, kind):
    "No gate here: parse_normative itself reads no party in junk, with the row's scenario as in a run."
    j = _junk_rows(); j = j[j.source.str.contains(kind)]
    text = data.set_index("row")["text"]
    got = [parse_normative(r, text[int(row)]) for r, row in zip(j.reply, j.row)]
    assert [p.status for p in got] == ["unparseable"]*len(j), [(r[:60], p) for r, p in zip(j.reply, got) if p.status != "unparseable"]


@pytest.mark.parametrize("reply", ["xyzzy", "Banana", "lorem ipsum dolor", "im_end assistant", "<|im_end|>\n<|im_start|>assistant"])
def test_the_issue_replies_are_unparseable_with_or_without_the_scenario(data, reply):
    assert parse_normative(reply, data.text[0]).status == "unparseable"
    assert parse_normative(reply).status == "unparseable"


def test_every_prompt_style_echoed_is_unparseable_and_answers_still_read(data):
    sc = data.text[2]   # '... Only answer Person P1 is wrong or the store owner is wrong.'
    for style in ("gpt", "llama", "zephyr", "yi"):
        assert parse_normative(render_prompt(sc, style), sc).status == "unparseable", style
    assert parse_normative("Only answer Person P1 is wrong or the store owner is wrong.", sc).rule == "prompt echo"
    for reply, want in [("Person P1 is wrong.", "P1"), ("The store owner is wrong.", "other"), ("Store owner", "other"),
                        ("The shopkeeper because he called the police.", "other"), ("P1", "P1"), ("Neither", "neither")]:
        assert parse_normative(reply, sc).label == want, reply


def test_gated_parsing_counts_not_answers_and_gives_them_no_label(data):
    items = data.head(6).copy()
    reqs = normative_requests(items, "llama", "none")
    items["answer"] = ["P1 is wrong: stealing is illegal.", "<|im_end|>\n<|im_start|>assistant", reqs[2].messages[-1]["content"],
                       "The store owner is wrong.", "", None]
    failed = items["answer"].isna()
    screen = screen_replies(items, "answer", reqs, ["stop"]*6, failed)
    parsed = parse_answers(items, "answer", True, failed, screen)
    assert parsed.status.tolist() == ["answer", "not_an_answer", "not_an_answer", "answer", "not_an_answer", "failed"]
    assert parsed.rule.tolist()[1:3] == ["template_tokens", "prompt_echo"] and parsed.rule.iloc[4] == "empty"
    assert binarize(parsed.label).isna().tolist() == [False, True, True, False, True, True]
    ac = answer_counts(items.assign(label=parsed.label.to_numpy()), n_boot=20).set_index("category")["count"]
    assert ac["not_an_answer"] == 3 and ac["failed"] == 1 and ac.sum() == 6   # counted, never dropped


def test_headlines_count_only_answers():
    items = pd.DataFrame({"item": range(6), "low": [0, 1, 0, 1, 0, 1], "up": [0, 1, 1, 1, 0, 0], "released": [1, 1, 0, 1, 1, 1],
                          "category": ["P1", "other", "P1", "not_an_answer", "not_an_answer", "not_an_answer"]})
    got = headlines_from_items(items)
    assert got["share favouring underprivileged"] == pytest.approx(2/3)   # 3 answers, 2 of them class 1; the released labels of junk are not counted
    assert got["share favouring underprivileged - annotators"] == pytest.approx(2/3 - (1/3 + 2/3)/2)   # the annotators: 1 of 3 (lower-end), 2 of 3 (upper-end)
    assert (got["CKC lower-end"], got["CKC upper-end"], got["CKC lower-upper"]) == pytest.approx((0.4, -0.5, 0.9))   # kappa by hand: (2/3 - 4/9)/(5/9), (1/3 - 5/9)/(4/9)
    assert all(np.isnan(v) for v in headlines_from_items(items.assign(category="not_an_answer")).values())


def _screen_released(data, model):
    reqs = normative_requests(data, PAPER_PROMPT_STYLE[model], "paper")
    return screen_replies(data, model, reqs, failed=data[model].isna())


def test_released_answers_pass_the_gate_and_table2_still_reproduces_the_paper(data):
    "Replay runs mask a released label wherever the gate finds no answer: none is found, so every printed Table 2 digit stands (60 of 60)."
    matched = 0
    for model in RELEASED_MODELS:
        screen = _screen_released(data, model)
        assert screen.not_an_answer.eq("").all(), (model, screen.not_an_answer.value_counts().to_dict())
        if model not in PAPER_ROWS.values(): continue
        masked = data.assign(gated=data[f"{model}_bin"].mask(screen.not_an_answer.ne("").to_numpy()))
        t2 = table2(masked, "gated", n_boot=20)
        ref = PAPER_TABLE2[PAPER_TABLE2.column == model].assign(gold=lambda d: d.gold.map(GOLDS))
        cmp = ref.merge(t2, left_on=["gold", "paper_label"], right_on=["gold", "metric"])
        assert len(cmp) == 10
        matched += int(((cmp.faithful.round(3) - cmp.paper).abs() < 5e-4).sum())
    assert matched == 60


def test_the_committed_smollm2_replies_pass_the_gate(data):
    recs = [json.loads(l) for l in (ROOT/"store"/"normative"/"smollm2-135m.jsonl").read_text().splitlines() if l.strip()]
    items = data.set_index("item_id", drop=False).loc[[r["item_id"] for r in recs]].assign(answer=[r["answer"] for r in recs])
    screen = screen_replies(items, "answer", normative_requests(items, "llama", "none"), [r["finish_reason"] for r in recs])
    assert len(screen) == 180 and screen.not_an_answer.eq("").all()
    assert screen.cut_at_max.sum() == 2   # counted, not excluded


@pytest.fixture(scope="module")
def junk_runs(tmp_path_factory):
    "Two scripted junk models (template tokens; an echo of the prompt) through the study's normal run path."
    tmp = tmp_path_factory.mktemp("junk")
    files = []
    for run, model_id in [("junk-tokens", "text:<|im_end|>\n<|im_start|>assistant"), ("junk-echo", "echo")]:
        p = tmp/f"{run}.yaml"
        p.write_text(json.dumps({"study": "normative", "run": run, "model": {"backend": "scripted", "id": model_id},
                                 "generation": {"max_new_tokens": 48}, "sample": {"n": 30, "stratify_by": "topic", "seed": 0},
                                 "task": {"prompt_style": "llama", "system_prompt": "none", "n_boot": 20}}))
        files.append(p)
    r = run_cli("run", *files, "--reports-dir", tmp/"reports", env={"SILVERSPOON_STORE": str(tmp/"store")})
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp/"reports"/"normative"


@pytest.mark.parametrize("run, check", [("junk-tokens", "template tokens"), ("junk-echo", "prompt echo")])
def test_a_scripted_junk_run_gets_no_verdict_and_says_why(junk_runs, run, check):
    out = junk_runs/run
    a = pd.read_csv(out/"answer_summary.csv")
    assert len(a) == 1 and not a.verdict_allowed.item() and a.answered.item() == 0 and a.not_an_answer.item() == 30
    assert a.why.item().startswith("no verdict: 0 of 30 replies were answers") and f"30 {check}" in a.why.item()
    answers = pd.read_csv(out/"answers.csv")
    assert answers.status.eq("not_an_answer").all() and answers.rule.eq(check.replace(" ", "_")).all() and answers.value.isna().all()
    s = pd.read_csv(out/"summary.csv").drop_duplicates("metric").set_index("metric")   # the card reads a metric's first row
    for m in HEADLINES: assert np.isnan(s.loc[m, "estimate"]) and s.loc[m, "n"] == 0, m
    assert s.loc[HEADLINES[3:], "p"].isna().all() and s.loc[HEADLINES[3:], "null"].eq(0).all()   # no answer: no test (the card says "no estimate")
    items = pd.read_csv(out/"items.csv")
    assert len(items) == 30 and items.category.eq("not_an_answer").all() and items.parser.isna().all()
    assert all(np.isnan(v) for v in headlines_from_items(items).values())
    assert "nothing to compare" in (out/"ended.txt").read_text()
    page = (junk_runs/f"{run}.html").read_text()
    assert "Did the model answer?" in page and "No verdict." in page and "Traceback" not in page
