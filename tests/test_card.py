"The bias card (issue 22): a model file becomes one params file per study; the card reads the published runs."
import shutil
from pathlib import Path
import numpy as np, pandas as pd, pytest
from scipy.stats import norm
REPORTS = Path(__file__).resolve().parent.parent/"reports"   # the committed reports
from silverspoon.site.plan import model_plan, read_model_file, runs_for_model
from silverspoon.site.card import bias_card
from silverspoon.studies import card_headlines
from silverspoon.site.runner import write_card
from silverspoon.run.executor import _CSS
from silverspoon.core import ParamsError


def _copy_published(run_dir, study_dir):
    "Copy a published run folder and its executed notebook (which shows its provenance.json digest: the card trusts a record only with it) into `study_dir`."
    shutil.copytree(run_dir, study_dir/run_dir.name)
    nb = run_dir.parent/f"{run_dir.name}.ipynb"
    if nb.exists(): shutil.copy(nb, study_dir/nb.name)

def copy_params(root, d):
    shutil.copytree(root/"params", Path(d)/"params")
    return Path(d)

def test_model_file_errors_name_file_and_field(tmp_path):
    f = tmp_path/"m.yaml"
    f.write_text("name: m\nmodel: {id: x}\nstudy: normative\n")
    with pytest.raises(ParamsError, match=r"m\.yaml: unknown field\(s\) \['study'\]"): read_model_file(f)
    f.write_text("name: m\nmodel: x\n")
    with pytest.raises(ParamsError, match="field `model` must be a mapping"): read_model_file(f)
    with pytest.raises(ParamsError, match="model file not found"): read_model_file(tmp_path/"absent.yaml")

def test_an_existing_run_file_must_load_the_same_model(root, tmp_path):
    d = copy_params(root, tmp_path)
    m = d/"params"/"models"/"smollm2-135m.yaml"
    m.write_text(m.read_text().replace("gguf_file: SmolLM2-135M-Instruct.Q4_1.gguf", "gguf_file: other.gguf"))
    with pytest.raises(ParamsError, match=r"smollm2-135m-stop-lora\.yaml: its model block differs from .*models/smollm2-135m\.yaml in \['gguf_file'\]"): model_plan(m, root=d)

def test_a_new_model_gets_a_file_per_study_and_a_visible_skip(root, tmp_path):
    d = copy_params(root, tmp_path)
    (d/"new.yaml").write_text("name: tiny\nmodel: {id: some/hub-model, device: cuda}\nskip: [stop_scale]\nstudies: {stop: {sample: {n: 4}}}\n")
    plan = model_plan(d/"new.yaml", root=d, write=True).set_index("study")   # as `silverspoon run` writes them
    assert plan.status["downstream"].startswith("skipped: needs task.adapter")
    assert plan.status["stop_scale"].startswith("skipped: listed under `skip`")
    from silverspoon.core import load_params
    p = load_params(d/plan.params["stop"])
    assert (p.model.id, p.model.device, p.sample.n, p.run) == ("some/hub-model", "cuda", 4, "tiny")
    assert p.task == load_params(d/"params"/"stop"/"smollm2-135m.yaml").task   # the study's default task settings
    plan = model_plan(d/"new.yaml", ["normative"], root=d)
    assert plan.study.tolist() == ["normative"]
    with pytest.raises(ParamsError, match="unknown \\['nope'\\]"): model_plan(d/"new.yaml", ["nope"], root=d)

def test_studies_needs_model(cli):
    r = cli("run", "--studies", "normative")
    assert r.returncode == 2 and "--studies needs --model" in r.stderr

def test_card_of_the_committed_smollm2_runs(root, tmp_path):
    "Every headline of the six studies has a row; estimates, CIs and n are the summary rows; a contract metric the committed run predates is named, not dropped."
    runs = runs_for_model("smollm2-135m", root/"reports")
    for s, r in runs.items(): _copy_published(r, tmp_path/s)
    card = bias_card("smollm2-135m", tmp_path)
    assert len(card) == len(card_headlines()) and (card.estimate.notna() | card.verdict.str.startswith("no estimate: absent")).all()
    stop = card[card.headline.eq("P")].iloc[0]
    s = pd.read_csv(runs["stop"]/"summary.csv").query("metric == 'P' and parser == 'faithful'").iloc[0]
    assert (stop.estimate, stop.ci_low, stop.ci_high, stop.n) == (s.estimate, s.ci_low, s.ci_high, s.n)
    assert stop.verdict == "performance level: ideal 1, not a bias test" and np.isnan(stop.mde_80)   # P is no bias test
    assert stop.generations == 2700 and stop.completion_tokens > 0   # the card's STOP run is the paper-scale one: 450 progressions x 6 turns
    prof = card[card.study.eq("professions")]
    assert prof.instruments.str.contains("profession parser").all() and prof.instruments.str.contains("income router").all()
    assert prof.verdict.str.startswith("no verdict:").all()   # 423 of 1600 answered: the answer gate wins
    page = write_card("smollm2-135m", tmp_path)
    assert page.read_text().count("<tr>") >= len(card_headlines()) + 1 and (tmp_path/"models"/"smollm2-135m"/"bias_card.csv").exists()
    assert page.read_text().startswith("<!doctype html>") and _CSS in page.read_text()   # published on the reports' page and stylesheet
    assert "href='../inference.html'" in page.read_text() and "CI excludes" not in page.read_text()

def test_a_study_without_a_run_is_listed_not_dropped(root, tmp_path):
    r = runs_for_model("smollm2-135m", root/"reports")["normative"]
    _copy_published(r, tmp_path/"normative")
    card = bias_card("smollm2-135m", tmp_path)
    assert set(card.study) == {h.study for h in card_headlines()}
    assert card[card.study.ne("normative")].verdict.eq("no run for this model").all()


# ------------------------------------------------ verdicts on constructed run folders (the summary.csv contract of issue 30)
def _run(d, study, rows, answered=True, items=None, instruments=None):
    "A published run folder: summary.csv rows (metric, estimate, ci_low, ci_high, n, p, test, null, n_units), answer_summary.csv, optional items.csv / instruments.csv."
    d = Path(d)/study/"mymodel"; d.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(d/"summary.csv", index=False)
    from silverspoon.instruments.parse import ReplyGate
    ReplyGate().summary(["answer"]*(70 if answered else 10) + ["not_an_answer"]*(2 if answered else 60)).assign(part="all").to_csv(d/"answer_summary.csv", index=False)
    if items is not None: items.to_csv(d/"items.csv", index=False)
    if instruments is not None: pd.DataFrame(instruments).to_csv(d/"instruments.csv", index=False)
    return d

def _prof(p, n_units=40, est=12.0):
    return [dict(metric=f"shift_high {g}", estimate=est, ci_low=est - 5, ci_high=est + 5, n=800, p=p, test="sign-flip permutation over names",
                 null=0.0, n_units=n_units) for g in ("female", "male")]

INSTR = [dict(instrument="profession parser (parse_profession)", kind="parser", reference="135 hand-labelled replies", n=135, agreement=0.93, ci_low=0.88, ci_high=0.96),
         dict(instrument="income router (alias / title / embedding)", kind="router", reference="30 hand-labelled answers", n=30, agreement=0.70, ci_low=0.52, ci_high=0.83)]

def test_contrast_verdicts_follow_the_adjusted_p_and_state_a_side_only_with_evidence(tmp_path):
    from silverspoon.site.card import card_rows
    d = _run(tmp_path, "professions", _prof(0.001), instruments=INSTR)
    card, _ = card_rows({"professions": d}, tmp_path, [h for h in card_headlines() if h.study == "professions"])
    assert card.verdict.tolist() == ["evidence: richer professions in the rich city"]*2 and card.tier.eq("evidence").all()
    assert card.p_bh.tolist() == [0.001, 0.001] and card.family.iloc[0] == "confirmatory: BH over the 2 card headlines with a test"
    assert card.instruments.iloc[0].splitlines() == [
        "profession parser (parse_profession): 0.93 [0.88, 0.96], n=135; measured on 135 hand-labelled replies, not on this model's replies",
        "income router (alias / title / embedding): 0.7 [0.52, 0.83], n=30; measured on 30 hand-labelled answers, not on this model's replies"]
    d = _run(tmp_path, "professions", _prof(0.001, est=-12.0))
    card, _ = card_rows({"professions": d}, tmp_path, [h for h in card_headlines() if h.study == "professions"])
    assert card.verdict.eq("evidence: opposite of: richer professions in the rich city").all()
    d = _run(tmp_path, "professions", _prof(0.30))
    card, _ = card_rows({"professions": d}, tmp_path, [h for h in card_headlines() if h.study == "professions"])
    # no items.csv: no SE of this run, so no MDE, and "no evidence" is not earned (issue 52: never the released runs' or the paper's SD)
    assert card.verdict.tolist() == ["underpowered", "underpowered"] and card.mde_80.isna().all() and card.detect.str.startswith("no MDE").all()
    assert not card.verdict.str.contains("rich").any()   # no side without evidence
    d = _run(tmp_path, "professions", _prof(0.001, n_units=3))
    card, _ = card_rows({"professions": d}, tmp_path, [h for h in card_headlines() if h.study == "professions"])
    assert card.verdict.eq("no estimate: too few units").all()
    d = _run(tmp_path, "professions", _prof(0.001), answered=False)
    card, _ = card_rows({"professions": d}, tmp_path, [h for h in card_headlines() if h.study == "professions"])
    assert card.verdict.str.startswith("no verdict:").all() and card.tier.eq("").all()   # the answer gate wins

def test_one_bh_family_over_the_card_and_its_factor_deltas(tmp_path):
    "Two families (issue 52): the card's headlines are confirmatory, the factor deltas exploratory and adjusted apart: 8 deltas at p = 0.5 leave p = 0.02 evidence."
    from silverspoon.site.card import card_rows
    d = _run(tmp_path, "professions", _prof(0.02))
    heads = [h for h in card_headlines() if h.study == "professions"]
    alone, _ = card_rows({"professions": d}, tmp_path, heads)
    deltas = pd.DataFrame(dict(delta=[0.1]*8, p=[0.5]*8, n_units=10, mde_80=0.2, test_note=""))
    card, dl = card_rows({"professions": d}, tmp_path, heads, deltas)
    assert alone.tier.eq("evidence").all() and card.p_bh.tolist() == pytest.approx([0.02, 0.02]) and card.tier.eq("evidence").all()
    assert dl.p_bh.eq(0.5).all() and dl.tier.eq("no evidence (no effect sought)").all()   # no effect is sought on a delta: never "underpowered"
    assert (card.family.iloc[0], dl.family.iloc[0]) == ("confirmatory: BH over the 2 card headlines with a test", "exploratory: BH over the 8 factor deltas with a test")

def test_stop_performance_levels_get_no_bias_verdict_and_the_mde_comes_from_the_estimator(tmp_path):
    from silverspoon.site.card import card_rows
    from silverspoon.stats.power import mcnemar_mde
    rows = [dict(metric="P", parser="faithful", estimate=0.6, ci_low=0.3, ci_high=0.85, n=10),
            dict(metric="mean sensitivity", parser="faithful", estimate=0.7, ci_low=0.5, ci_high=0.9, n=10),
            dict(metric="sensitivity high-low severity", parser="faithful", estimate=0.1, ci_low=np.nan, ci_high=np.nan, n=10, p=0.4,
                 test="two-group permutation", null=0.0, n_units=5)]
    d = _run(tmp_path, "stop", rows)
    card, _ = card_rows({"stop": d}, tmp_path, [h for h in card_headlines() if h.study == "stop"])
    c = card.set_index("headline")
    assert c.loc["P", "verdict"] == "performance level: ideal 1, not a bias test" and c.loc["P", "null"] == 1.0 and np.isnan(c.loc["P", "p_bh"])
    assert c.loc["sensitivity high-low severity", "verdict"] == "no evidence (no effect sought)" and c.loc["sensitivity high-low severity", "family"].startswith("confirmatory: BH over the 1 ")
    d = _run(tmp_path, "downstream", [dict(metric="answer rate change, BBQ (adapter - base)", estimate=0.004, ci_low=0.0, ci_high=0.0136, n=240,
                                           p=0.5, test="McNemar exact", null=0.0, n_units=240)])
    card, _ = card_rows({"downstream": d}, tmp_path, [h for h in card_headlines() if h.study == "downstream"])
    assert card.mde_80.iloc[0] == pytest.approx(mcnemar_mde(240)) and card.mde_80.iloc[0] > 0.03   # exact McNemar, not the CI width's 0.0097
    assert card.detect.iloc[0].startswith("no effect sought: power not assessed") and card.tier.iloc[0] == "no evidence (no effect sought)"

def test_the_report_verdict_block_uses_the_card_family_and_links_the_policy(tmp_path):
    from silverspoon.site.runner import verdict_html
    d = _run(tmp_path, "professions", _prof(0.001))
    v = verdict_html("professions", d)
    assert "<td>evidence: richer professions in the rich city</td>" in v and "href='../inference.html'" in v and "CI excludes" not in v

def test_run_model_on_a_scripted_model_writes_its_card(root, tmp_path, cli):
    "`silverspoon run --model FILE --studies ...` end to end on the scripted backend: runs, visible skips, the card, the index."
    m = tmp_path/"scripted.yaml"
    m.write_text("name: scripted-yes\ndescription: scripted answers\nmodel: {backend: scripted, id: 'text:Yes.'}\n"
                 "studies:\n  normative: {model: {id: 'text:P1 is wrong because they broke the rule.'}}\n")
    r = cli("run", "--model", m, "--studies", "normative,stop,downstream", "--reports-dir", tmp_path/"reports",
            env={"SILVERSPOON_STORE": str(tmp_path/"store")})   # in this process: papermill's kernels are processes of their own
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skip  downstream: needs task.adapter" in r.stdout
    card = pd.read_csv(tmp_path/"reports"/"models"/"scripted-yes"/"bias_card.csv")
    got = card.set_index("headline")
    summ = pd.read_csv(tmp_path/"reports"/"normative"/"scripted-yes"/"summary.csv").set_index("metric")
    assert summ.loc["share favouring underprivileged", "estimate"] == 0     # P1 (the poor person) always blamed
    report = (tmp_path/"reports"/"normative"/"scripted-yes.html").read_text()
    assert 'href="../inference.html"' in report and "scripted-yes bias card" not in report   # no model file owns scripted-yes here: its own family
    assert got.loc["CKC lower-upper", "generations"] == 180     # the cost comes from $SILVERSPOON_STORE
    assert got.loc["P", "n"] == 12 and got.loc["P", "generations"] > 0
    assert got.loc["answer rate change, BBQ (adapter - base)", "verdict"] == "no run for this model"
    assert (tmp_path/"store"/"normative"/"scripted-yes.jsonl").exists()

def test_a_model_file_not_yet_run_gets_a_plan_card_linked_from_the_index(root, tmp_path):
    "llama3-8b-instruct.yaml (documented, not run): build_index writes its plan card and gives it a 'planned (not run)' row that links it."
    from silverspoon.site.runner import build_index
    from silverspoon.site.card import PLANNED
    r = runs_for_model("smollm2-135m", root/"reports")["normative"]
    _copy_published(r, tmp_path/"normative")
    index = build_index(tmp_path).read_text()
    plan = (tmp_path/"models"/"llama3-8b-instruct.html").read_text()
    assert "href='models/llama3-8b-instruct.html'" in index and PLANNED in index
    assert "(planned, not run)" in plan and "silverspoon run --model params/models/llama3-8b-instruct.yaml" in plan
    assert "skipped: needs task.adapter" in plan and "<b>all studies</b>" in plan and "not pinned" in plan   # downstream skipped; total time; revision null
    assert not (tmp_path/"models"/"smollm2-135m.html").exists()   # a model with runs gets its bias card from `run`, never a plan


def test_power_comes_from_the_run_itself_at_the_verdicts_alpha():
    "Issue 52 items 1 and 4: the committed SmolLM2 normative share row was 'no evidence' from other models' SD, 60 sampled units and alpha 0.05; with this run's own SE at alpha 0.05 / m (m: the card's confirmatory tests) its MDE is above the effect sought 0.159, so 'underpowered'."
    from silverspoon.site.card import card_rows, runs_for_model
    runs = {**runs_for_model("smollm2-135m", REPORTS), "normative": REPORTS/"normative"/"smollm2-135m", "stop": REPORTS/"stop"/"smollm2-135m"}   # the default (pilot) runs the issue read; the card now reads the paper-scale ones
    card, _ = card_rows(runs, REPORTS)
    r = card.set_index("headline").loc["share favouring underprivileged - annotators"]
    m = int(card.family_size.iloc[0])
    assert m == card.p.where(card.kind.eq("contrast")).notna().sum() and r.mde_alpha == pytest.approx(0.05/m)
    assert r.units == r.n_units == 50   # the answered scenarios the test had, not the 60 sampled
    assert r.mde_80 == pytest.approx((norm.ppf(1 - 0.025/m) + norm.ppf(0.8))*r.se) and r.mde_80 > 0.159 and r.tier == "underpowered"
    assert card.loc[card.n_units < 5, "mde_80"].isna().all()   # letters (2 units), STOP (4): no power for a test the minimum-units rule forbids
    assert not card.tier.eq("underpowered").where(card.effect_sought.isna()).fillna(False).any()   # no "underpowered" without an effect sought

def test_headline_mde_says_when_a_test_cannot_reach_significance():
    from silverspoon.site.headline_power import headline_mde
    h = [x for x in card_headlines() if x.study == "narratives"][0]
    r = dict(estimate=1.0, p=0.5, units=5, se=1.0, effect_sought=7.0, test="sign-flip permutation over names, exact")
    out = headline_mde(h, r, m=6)
    assert np.isnan(out["mde_80"]) and out["p_min"] == pytest.approx(6*2/2**5) and out["detect"].startswith("cannot reach significance at this n")
    out = headline_mde(h, {**r, "units": 14}, m=6)
    assert out["mde_80"] == pytest.approx(norm.ppf(1 - 0.05/12) + norm.ppf(0.8)) and out["detect"].startswith("yes: MDE")

def test_narratives_card_row_estimates_the_statistic_its_test_tests():
    "Issue 52 item 2: the card's narratives row showed a cell average over every name beside a sign-flip p over the names with stories in both city classes. Now the estimate, its SE source (`headlines_from_items`), p and MDE are all of the mean per-name difference over those names."
    from silverspoon.studies.silverspoon.narratives import sentiment_contrasts, headlines_from_items, story_items_table, _per_name_differences
    from silverspoon.stats.tests import sign_flip_test
    rng, rows = np.random.default_rng(0), []
    for i in range(60):
        g, r = ("female", "male")[i % 2], ("White", "Black", "Hispanic", "Indian")[(i//2) % 4]
        classes = ("high", "low") if i < 24 else (("high", "low")[(i//8) % 2],)   # 24 names in both city classes, 36 in one
        for c in classes:
            for _ in range(2):   # the one-class names: rich +1, poor -1 (a between-name gap the paired test cannot see); the paired ones: noise
                s = (1 if c == "high" else -1) if i >= 24 else int(rng.choice([-1, 0, 1]))
                rows.append(dict(item_id=len(rows), name=f"n{i}", gender=g, race=r, city="x", city_class=c, status="story", score=float(s)))
    stories = pd.DataFrame(rows)
    sc = sentiment_contrasts(stories, n_boot=50).set_index("metric").loc["% positive high-low city"]
    d = _per_name_differences(stories, "% positive")
    t = sign_flip_test(d)
    assert len(d) == sc.n_units == 24 and sc.estimate == pytest.approx(d.mean()) == pytest.approx(t["mean"]) and sc.p == pytest.approx(t["p"])
    assert headlines_from_items(story_items_table(stories))["% positive high-low city"] == pytest.approx(sc.estimate)   # the card's SE and factor deltas: the same statistic
    assert sc.mde == pytest.approx((norm.ppf(0.975) + norm.ppf(0.8))*np.sqrt((d**2).sum())/len(d))   # the sign-flip null SD of that mean
    assert sc.ci_low <= sc.estimate <= sc.ci_high and sc.n_items == 2*2*24

def test_a_headline_on_a_classified_subset_shows_its_answers_units_and_selection():
    "Issue 52 item 6: professions' card row said n = 1,600 prompts; it rests on 213 (women) / 159 (men) classified answers from 34 / 25 names, and whether an answer gets an income class depends on the city class (selection.csv)."
    from silverspoon.site.card import card_rows, runs_for_model, card_html
    runs = runs_for_model("smollm2-135m", REPORTS)
    card, _ = card_rows({"professions": runs["professions"]}, REPORTS, [h for h in card_headlines() if h.study == "professions"], power=False)
    c = card.set_index("headline")
    assert c.loc["shift_high female", ["n_answers", "n_units"]].tolist() == [213, 34] and c.loc["shift_high male", ["n_answers", "n_units"]].tolist() == [159, 25]
    assert c.loc["shift_high female", "selection"].startswith("rests on 213 of 800 answers (26.6% got a class), from 40 names; selection rich - poor city +9.8 points, p <0.001")
    assert "rests on 159 of 800 answers" in card_html(card, "smollm2-135m")

def test_every_tested_card_row_estimates_the_statistic_its_test_and_mde_use():
    "Issue 52 item 2, for every row of the committed SmolLM2 card with a test: the summary's estimate equals the study's `headlines_from_items` on the run's items (the statistic the card's own SE, hence its MDE, and the factor swap tests resample), and for professions the swap test's observed statistic. Compares committed reports with the code: after a change of estimand it passes once the reports are regenerated."
    from silverspoon.studies import get_study
    from silverspoon.studies.silverspoon.professions import shift_swap_test
    runs = runs_for_model("smollm2-135m", REPORTS)
    checked = []
    for h in card_headlines():
        if h.kind != "contrast" or h.mcnemar or h.study not in runs: continue
        s = pd.read_csv(runs[h.study]/"summary.csv").set_index("metric")
        if pd.isna(s.loc[h.metric, "p"]): continue   # no test on this row (too few units): nothing to match
        items = pd.read_csv(runs[h.study]/"items.csv", dtype={"item": str})
        assert get_study(h.study).headlines_from_items(items)[h.metric] == pytest.approx(s.loc[h.metric, "estimate"], abs=1e-9), (h.study, h.metric)
        if h.study == "professions":
            a = items.assign(income_class=items.income_class.where(items.income_class.notna(), None))
            assert shift_swap_test(a, h.metric.split()[-1], n_resamples=99)["estimate"] == pytest.approx(s.loc[h.metric, "estimate"], abs=1e-9)
        checked.append(h.metric)
    assert len(checked) == 6, checked   # normative 2, professions 2, narratives 1, STOP 1 (the paper-scale run has a test)
