"""`silverspoon compare`: model against model on the units both runs answered (silverspoon.studies.compare, silverspoon.site.compare_page, the CLI).

Cheap: the released runs' items.csv restricted to a few units, or a toy study; few resamples where only the
estimates are checked. The false-positive rate of the test is a committed simulation (benchmarks/bench_compare.py),
not a test."""
import dataclasses
import numpy as np, pandas as pd, pytest
from silverspoon.core import project_root, ParamsError
from silverspoon.studies import Study, Headline, get_study
from silverspoon.studies.compare import pair_deltas, compare_runs, read_run, shared_frames, PAIR_COLUMNS, model_order, units_to_separate
from silverspoon.site.compare_page import compare_links, against_released, compare_plan
from silverspoon.site.cli import main

REPORTS = project_root()/"reports"

def _units(df, k):
    "The rows of the first k units of a run's items.csv."
    keep = sorted(df["item"].astype(str).unique())[:k]
    return df[df["item"].astype(str).isin(keep)].reset_index(drop=True)

@dataclasses.dataclass
class _Task: pass

def _toy(metric="mean y"):
    return Study(name="toy", title="toy", notebook="99_toy.ipynb", task=_Task, validate=lambda p, s: _Task(), summary_rows=lambda *a: None,
                 headlines=(Headline("toy", metric, "the mean of y"),), units=("unit", 3),
                 headlines_from_items=lambda d: {metric: d["y"].mean() if len(d) else np.nan})

def _run(rate, units=100, seed=0):
    r = np.random.default_rng(seed)
    return pd.DataFrame({"item": np.repeat(np.arange(units), 3).astype(str), "y": (r.random(units*3) < rate).astype(int)})

def test_run_against_itself_is_delta_zero_p_one():
    "A released run paired with itself: every headline's delta is 0 and the swap test's p is 1 (every pattern leaves it 0); the CLI refuses the same run twice."
    s = get_study("normative")
    a = _units(read_run(REPORTS, "normative", "gpt4-replay")[0], 40)
    d = pair_deltas(a, a, s.headlines_from_items, [h.metric for h in s.headlines], n_perm=99, n_boot=49)
    assert (d.delta == 0).all() and (d.p == 1).all(), d[["headline", "delta", "p"]]
    assert main(["compare", "normative", "gpt4-replay", "gpt4-replay"]) == 2

def test_planted_difference_told_apart_null_twins_not():
    "Scripted models: two alike (null twins) and one planted apart; only the planted pairs are evidence, and each interval holds its delta."
    runs = {"x": _run(0.4, seed=1), "x-twin": _run(0.4, seed=2), "planted": _run(0.65, seed=3)}
    c = compare_runs(_toy(), runs, n_perm=199, n_boot=99)
    tier = dict(zip(c.run_a + ">" + c.run_b, c.tier))
    assert tier["x>planted"] == "evidence" and tier["x-twin>planted"] == "evidence" and tier["x>x-twin"] != "evidence", tier
    shown = c.dropna(subset=["ci_low"])
    assert len(shown) and ((shown.ci_low <= shown.delta) & (shown.delta <= shown.ci_high)).all()
    assert model_order(c, "mean y")["claims"] and all(x.startswith("planted above") for x in model_order(c, "mean y")["claims"])

def test_delta_is_difference_of_own_estimates_on_shared_units():
    "estimate_a and estimate_b are each run's own headlines_from_items on the shared units (all 1000 scenarios of two released runs), delta their difference; the paper's order beside it."
    s = get_study("normative")
    items = {r: read_run(REPORTS, "normative", r)[0] for r in ("gpt35-replay", "zephyr7b-replay")}
    c = compare_runs(s, items, {"gpt35-replay": "GPT3.5", "zephyr7b-replay": "Zephyr7B"}, n_perm=19, n_boot=19)
    assert list(c.columns) == PAIR_COLUMNS and len(c) == len(s.headlines)
    own = {r: s.headlines_from_items(v) for r, v in items.items()}
    for r in c.itertuples():
        assert r.estimate_a == own["gpt35-replay"][r.headline] and r.estimate_b == own["zephyr7b-replay"][r.headline]
        assert r.delta == r.estimate_b - r.estimate_a and r.n_units == 1000 and r.units_a_only == r.units_b_only == 0
    ckc = c[c.headline.eq("CKC lower-upper")].iloc[0]
    assert ckc.paper_delta == pytest.approx(-0.068 - 0.052) and ckc.paper_supported != ""

def test_partly_shared_units_counted():
    "Units only one run answered are counted, and the estimates are on the shared ones only."
    s = get_study("stop")
    a, b = (read_run(REPORTS, "stop", r)[0] for r in ("gpt4-replay", "llama2-70b-replay"))
    ua = sorted(a["item"].unique())
    a, b = a[a["item"].isin(ua[:30])], b[b["item"].isin(ua[20:60])]
    d = pair_deltas(a, b, s.headlines_from_items, [h.metric for h in s.headlines], n_perm=19, n_boot=19)
    assert (d.n_units == 10).all() and (d.units_a_only == 20).all() and (d.units_b_only == 30).all()
    sa, sb, _, _ = shared_frames(a, b)
    own = s.headlines_from_items(sa)
    assert d.set_index("headline").estimate_a.to_dict() == pytest.approx({h.metric: own[h.metric] for h in s.headlines}, nan_ok=True)

def test_undefined_headline_is_nan_with_reason():
    "STOP's severity contrast needs high and low progressions: on units of one severity it is NaN with a reason, no p, no crash; P still compares."
    s = get_study("stop")
    a, b = (read_run(REPORTS, "stop", r)[0] for r in ("gpt4-replay", "mistral-7b-replay"))
    high = set(a.loc[a.severity.astype(str).eq("high"), "item"])
    a, b = a[a["item"].isin(high)], b[b["item"].isin(high)]
    d = pair_deltas(a, b, s.headlines_from_items, [h.metric for h in s.headlines], n_perm=19, n_boot=19).set_index("headline")
    sev = d.loc["sensitivity high-low severity"]
    assert np.isnan(sev.delta) and np.isnan(sev.p) and "no estimate" in sev.note
    assert np.isfinite(d.loc["P"].delta)

def test_junk_headline_function_never_crashes():
    "A headlines_from_items that raises on the items gives NaN rows with the error, not a traceback."
    def boom(d): raise KeyError("released")
    d = pair_deltas(_run(0.5), _run(0.5, seed=1), boom, ["mean y"], n_perm=19, n_boot=19).iloc[0]
    assert np.isnan(d.delta) and np.isnan(d.p) and "KeyError" in d.note

def test_cli_writes_pairs_and_page(tmp_path):
    "`silverspoon compare STUDY RUN RUN --out DIR` writes <out>/<study>/pairs.csv with the issue's columns and a page the index links."
    rc = main(["compare", "stop", "gpt4-replay", "llama2-70b-replay", "mistral-7b-replay", "--out", str(tmp_path/"compare"), "--n-perm", "19", "--n-boot", "19"])
    assert rc == 0
    p = pd.read_csv(tmp_path/"compare"/"stop"/"pairs.csv")
    assert list(p.columns) == PAIR_COLUMNS and len(p) == 3*2 and p.n_units.eq(450).all()
    page = (tmp_path/"compare"/"stop"/"index.html").read_text()
    assert "model against model" in page and "<img" in page and "delta = column run - row run" in page
    assert "compare/stop/index.html" in compare_links(tmp_path)
    assert compare_links(tmp_path/"nothing") == ""
    assert main(["compare", "stop", "gpt4-replay", "gpt35-replay", "--n-perm", "-3", "--out", str(tmp_path)]) == 2   # refused before anything is read

def test_plan_compare_units():
    "`plan --compare`: units from the pair's paired SD, ((z_.975 + z_.8) SD / d)^2; a study with no released run is refused."
    assert units_to_separate(1.0, 0.28) == 101
    pl = compare_plan("stop", "smollm2-135m", REPORTS, d=0.1, n_perm=19, n_boot=49)
    assert len(pl) == 10*2 and (pl.units_needed.dropna() > 0).all()
    with pytest.raises(ParamsError, match="no released run"): compare_plan("professions", "smollm2-135m", REPORTS)

def test_card_section_pairs_the_model_with_each_released_model():
    "The card's 'against the released models': the model's run (b) against each released run (a) on the units both answered, delta = own - released, one BH family of its own."
    from silverspoon.site.compare_page import against_released_html
    from silverspoon.stats import bh_fdr
    card = pd.DataFrame({"study": ["stop", "stop"], "run": ["smollm2-135m", "smollm2-135m"]})
    ar = against_released(card, REPORTS)
    assert set(ar.run_b) == {"smollm2-135m"} and ar.run_a.nunique() == 10 and len(ar) == 10*2
    own = set(read_run(REPORTS, "stop", "smollm2-135m")[0]["item"])
    assert (ar.n_units == len(own)).all() and (ar.delta == ar.estimate_b - ar.estimate_a).all()
    assert np.allclose(ar.p_bh, bh_fdr(ar.p.to_numpy(dtype=float)), equal_nan=True)
    page = against_released_html(ar)
    assert "Against the released models" in page and "../compare/stop/index.html" in page


def test_a_pair_with_a_model_that_did_not_answer_gets_no_verdict(root):
    "A model the answer gate gives no verdict (it echoed, refused or answered in another language) yields no finding against any other, even where its few answered units differ: the pair's tier says why."
    from silverspoon.studies.compare import answer_gate
    got = {r: read_run(root/"reports", "normative", r) for r in ("gpt35-replay", "zephyr7b-replay")}
    gates = {r: answer_gate(root/"reports"/"normative"/r) for r in got}
    assert all(g["verdict_allowed"] for g in gates.values())   # both released runs answered
    gates["zephyr7b-replay"] = dict(verdict_allowed=False, why="no verdict: 30 of 3000 replies were answers (2970 not an answer: 2970 other language)")
    pr = compare_runs("normative", {r: v[0] for r, v in got.items()}, {r: v[1] for r, v in got.items()}, n_perm=19, n_boot=19, gates=gates)
    assert pr.tier.str.startswith("no verdict: zephyr7b-replay: 30 of 3000 replies were answers").all(), pr.tier.tolist()
    assert not pr.paper_supported.eq("supported").any()   # Table 2's order is not claimed from a model that did not answer
