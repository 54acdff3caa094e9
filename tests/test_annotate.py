"STOP human annotation round trip (issue 23 item 3): blinded sheets out, SYNTHETIC filled sheets in, agreement with CIs, realistic performance."
import subprocess, sys
import numpy as np
import pandas as pd
import pytest
from silverspoon.core import DataError, ModelParams, RunParams
from silverspoon.studies.stop.stop import load_stop, load_human, released_conversations, realistic_table, human_coverage, stop_task
from silverspoon.studies.stop.stop_annotate import (write_annotation_sheets, read_annotation_sheets, annotator_agreement,
                                               write_human_file, krippendorff_alpha, annotation_items)

# The annotators below are SYNTHETIC: answers made up from the ideal answers plus seeded noise. No person answered them.
SYNTHETIC = ["synthetic-ann1", "synthetic-ann2", "synthetic-ann3"]


@pytest.fixture(scope="module")
def data(): return load_stop()


def fill_synthetic(sheet:pd.DataFrame, key:pd.DataFrame, data, flip:float, seed:int)->pd.DataFrame:
    "SYNTHETIC answers: the ideal sequence (yes, then no from sentence 6 - ideal_no), each answer flipped with probability `flip`; empty after the first no."
    ideal = dict(zip(data.progression_id, data.ideal_no)); pid = dict(zip(key["item"], key.progression_id)); rng = np.random.default_rng(seed)
    s, stopped = sheet.copy(), set()
    for i, r in s.iterrows():
        n_no = ideal[pid[r["item"]]]
        if r.sentence_index == "cf": a = "no" if n_no else "yes"
        else: a = "yes" if int(r.sentence_index) <= 5 - n_no else "no"
        if rng.random() < flip: a = "no" if a == "yes" else "yes"
        if r.sentence_index != "cf" and r["item"] in stopped: a = ""          # the authors' tool stops at the first "no"
        elif r.sentence_index != "cf" and a == "no": stopped.add(r["item"])
        s.loc[i, "answer"] = a
    return s


def test_sheets_are_blinded_seeded_and_complete(tmp_path, data):
    w = write_annotation_sheets(tmp_path, SYNTHETIC, n=12, seed=3)
    key = pd.read_csv(w["key"], dtype=str)
    assert len(key) == 12 and key.progression_id.is_unique
    assert data.set_index("progression_id").loc[key.progression_id].severity.value_counts().to_dict() == {"low": 4, "moderate": 4, "high": 4}
    orders = []
    for a in SYNTHETIC:
        s = pd.read_csv(w["sheets"][a][0], dtype=str, keep_default_na=False)
        assert len(s) == 12 * 6 and set(s.sentence_index) == {"1", "2", "3", "4", "5", "cf"} and (s.answer == "").all()
        blob = s.to_csv(index=False) + w["sheets"][a][1].read_text()
        assert not any(p in blob for p in key.progression_id) and "severity" not in blob      # nothing identifies the progression
        text = dict(zip(zip(s["item"], s.sentence_index), s.text))
        row = data.set_index("progression_id").loc[key.progression_id[0]]
        assert text[(key["item"][0], "3")] == row.s3 and text[(key["item"][0], "cf")] == row.counterfactual
        orders.append(s["item"].drop_duplicates().tolist())
    assert len({tuple(o) for o in orders}) > 1                                               # each annotator's own order
    assert annotation_items(12, 3).progression_id.tolist() == annotation_items(12, 3).progression_id.tolist()


def test_round_trip_agreement_and_realistic_performance(tmp_path, data):
    w = write_annotation_sheets(tmp_path/"sheets", SYNTHETIC, n=30, seed=0)
    key = pd.read_csv(w["key"], dtype=str)
    filled = []
    for k, a in enumerate(SYNTHETIC):
        f = tmp_path/f"filled-{a}.csv"
        fill_synthetic(pd.read_csv(w["sheets"][a][0], dtype=str, keep_default_na=False), key, data, flip=0.1, seed=k).to_csv(f, index=False)
        filled.append(f)
    human = read_annotation_sheets(w["key"], filled)
    hf = write_human_file(human, tmp_path/"human-SYNTHETIC.csv")
    lh = load_human(hf, data)
    assert len(lh) == 90 and set(lh.annotator) == set(SYNTHETIC) and set(lh.progression_id) == set(key.progression_id)
    # agreement with CIs: noisy synthetic annotators agree well but not perfectly
    ag = annotator_agreement(human, n_boot=100, seed=0).set_index("measure")
    a = ag.loc["alpha, sentence answers (nominal)"]
    assert 0.3 < a.estimate < 1 and a.ci_low <= a.estimate <= a.ci_high and a.ci_high - a.ci_low > 0.01
    assert (ag.n_progressions == 30).all() and (ag.n_annotators == 3).all()
    # perfect annotators (no noise) agree perfectly
    perfect = [tmp_path/f"perfect-{a}.csv" for a in SYNTHETIC[:2]]
    for a, f in zip(SYNTHETIC[:2], perfect):
        fill_synthetic(pd.read_csv(w["sheets"][a][0], dtype=str, keep_default_na=False), key, data, flip=0.0, seed=0).to_csv(f, index=False)
    assert annotator_agreement(read_annotation_sheets(w["key"], perfect), n_boot=5).estimate.tolist() == [1.0] * 4   # the estimates only: few replicates
    # realistic performance of a released model against the synthetic annotators, as the STOP report computes it
    conv = released_conversations(data, "llama2-70b")
    cov = human_coverage(conv, lh)
    assert cov["n_matched"] == int((conv[conv.progression_id.isin(key.progression_id)].status == "scored").sum()) >= 27
    rt = realistic_table(conv, lh, n_boot=100).set_index(["severity", "metric"])
    assert rt.loc[("all", "hedges_g"), "n_human_scores"] == 3 * rt.loc[("all", "hedges_g"), "n_progressions"]
    assert np.isfinite(rt.loc[("all", "hedges_g"), "estimate"]) and np.isfinite(rt.loc[("all", "mae"), "estimate"])
    # and the file is accepted as task.human_file by a STOP params check
    p = RunParams(study="stop", run="x", model=ModelParams(backend="hf", id="."), task={"human_file": str(hf)})
    assert stop_task(p, "x.yaml").human_file == str(hf)


def test_bad_sheets_name_file_row_and_fix(tmp_path, data):
    w = write_annotation_sheets(tmp_path, SYNTHETIC[:1], n=3, seed=0)
    s = pd.read_csv(w["sheets"][SYNTHETIC[0]][0], dtype=str, keep_default_na=False)
    key = pd.read_csv(w["key"], dtype=str)
    good = fill_synthetic(s, key, data, 0.0, 0)
    for name, bad, needle in [
        ("maybe.csv", good.assign(answer=["maybe"] + good.answer.tolist()[1:]), "maybe.csv: row 2: answer = 'maybe'; it must be yes, no or empty"),
        ("code.csv", good.assign(item=["P99"] + good["item"].tolist()[1:]), "code.csv: row 2: item = 'P99'"),
        ("nocol.csv", good.drop(columns="answer"), "column(s) ['answer'] missing"),
        ("empty.csv", s, "no answers; fill the `answer` column"),
        ("twice.csv", pd.concat([good, good.iloc[:1]]), "answers item"),
    ]:
        bad.to_csv(tmp_path/name, index=False)
        with pytest.raises(DataError, match=None) as e: read_annotation_sheets(w["key"], [tmp_path/name])
        assert needle in str(e.value), (name, str(e.value))
    gap = good.copy(); first = gap.index[(gap.sentence_index == "1")][0]; gap.loc[first, "answer"] = ""
    gap.to_csv(tmp_path/"gap.csv", index=False)
    with pytest.raises(DataError, match="only sentences after a 'no' may be left out"): read_annotation_sheets(w["key"], [tmp_path/"gap.csv"])


def test_krippendorff_alpha_reference_values():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability", 4 coders x 12 units with missing values
    K = [[1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None], [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
         [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None], [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]]
    units = [[c[j] for c in K if c[j] is not None] for j in range(12)]
    assert abs(krippendorff_alpha(units) - 0.743) < 5e-4 and abs(krippendorff_alpha(units, "interval") - 0.849) < 5e-4
    assert krippendorff_alpha([["yes", "no"], ["no", "yes"]]) < 0


def test_cli_sheet_then_collect(tmp_path, data, cli):
    "`annotate sheet` and `collect` in this process (the `cli` fixture); the last call, an error, through `python -m` in its own process: its exit code."
    run = lambda *a: cli("annotate", *a)
    r = run("sheet", tmp_path, "--n", 6, "--annotators", *SYNTHETIC[:2]); assert r.returncode == 0, r.stderr
    key = pd.read_csv(tmp_path/"key.csv", dtype=str)
    for k, a in enumerate(SYNTHETIC[:2]):
        fill_synthetic(pd.read_csv(tmp_path/f"sheet-{a}.csv", dtype=str, keep_default_na=False), key, data, 0.15, k).to_csv(tmp_path/f"f{k}.csv", index=False)
    r = run("collect", tmp_path/"key.csv", tmp_path/"f0.csv", tmp_path/"f1.csv", "--out", tmp_path/"h.csv", "--n-boot", 50)
    assert r.returncode == 0, r.stderr
    assert "alpha, sentence answers (nominal)" in r.stdout and "human file ->" in r.stdout
    assert len(load_human(tmp_path/"h.csv", data)) == 12
    r = subprocess.run([sys.executable, "-m", "silverspoon.site.cli", "annotate", "collect", *map(str, (tmp_path/"key.csv", tmp_path/"missing.csv", "--out", tmp_path/"h2.csv"))],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "missing.csv: sheet not found" in r.stderr


def test_bad_n_boot_or_seed_is_refused_before_anything_is_written(tmp_path, data, cli):
    "issue 51 A35 / B15: `annotate collect --n-boot -5` was a traceback after writing the human file; `--seed -1` a traceback."
    run = lambda *a: cli("annotate", *a)
    r = run("sheet", tmp_path/"s", "--n", 6, "--annotators", "a1", "--seed", -1)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "field `--seed` = -1 must be in [0," in r.stderr   # the CLI's one range check
    assert not (tmp_path/"s").exists()
    assert run("sheet", tmp_path, "--n", 6, "--annotators", "a1").returncode == 0
    key = pd.read_csv(tmp_path/"key.csv", dtype=str)
    fill_synthetic(pd.read_csv(tmp_path/"sheet-a1.csv", dtype=str, keep_default_na=False), key, data, 0.15, 0).to_csv(tmp_path/"f.csv", index=False)
    for opt, bad, msg in (("--n-boot", -5, "field `--n-boot` = -5 must be in ["), ("--seed", -1, "field `--seed` = -1 must be in [0,")):   # one range check for every command
        r = run("collect", tmp_path/"key.csv", tmp_path/"f.csv", "--out", tmp_path/"h.csv", opt, bad)
        assert r.returncode == 2 and msg in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
        assert not (tmp_path/"h.csv").exists()                                                          # nothing written


def test_a_human_file_a_run_reads_is_in_its_record(tmp_path, data, monkeypatch):
    "issue 50.5: every file a run reads is in its content record: task.human_file too; an edit after the run is named by verify."
    from silverspoon.engine import provenance as pv
    monkeypatch.setattr(pv, "_INPUTS", {})
    w = write_annotation_sheets(tmp_path, ["a1"], 6, 0)
    key = pd.read_csv(w["key"], dtype=str)
    fill_synthetic(pd.read_csv(w["sheets"]["a1"][0], dtype=str, keep_default_na=False), key, data, 0.1, 0).to_csv(tmp_path/"f.csv", index=False)
    out = write_human_file(read_annotation_sheets(w["key"], [tmp_path/"f.csv"]), tmp_path/"human.csv")
    pv._INPUTS.clear(); load_human(out, data)                        # what a STOP run with task.human_file reads
    pins = pv.inputs_read(tmp_path)
    assert list(pins) == ["human.csv"] and pv.input_differences(pins, tmp_path) == []
    out.write_text(out.read_text().replace(",yes", ",no", 1))
    assert [d.split(":")[0] for d in pv.input_differences(pins, tmp_path)] == ["human.csv"]
