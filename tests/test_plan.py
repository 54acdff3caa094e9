"Power before and after (issue 30 item 7): the n that detects the papers' effects, `silverspoon plan`, and the `--scale paper` preset."
import re, shutil
from pathlib import Path
import numpy as np, pandas as pd, pytest
from scipy.stats import binom
from silverspoon.stats.power import (normal_n, normal_power, mcnemar_power, mcnemar_n, mcnemar_mde, unit_sd, replicate_sd,
                                     headline_replicates, min_detectable_effect)
from silverspoon.site.card import study_headlines
from silverspoon.site.headline_power import paper_effect, paper_binomial_sd, headline_power, detect_line
from silverspoon.site.plan import scale_plan, sample_units
from silverspoon.studies import card_headlines
from silverspoon.core import read_params_mapping, ParamsError
from silverspoon.studies import get_study
from silverspoon.studies.stop.stop_downstream import BBQ_ITEMS

NEEDS_REGENERATED_ITEMS = {"CKC lower-upper", "share favouring underprivileged - annotators", "sensitivity high-low severity"}   # issue 30's new contrasts: their SD per unit needs items.csv (and headlines_from_items) that carry them
STUDIES_RUN = ["normative", "professions", "narratives", "letters", "stop"]   # what llama3-8b-instruct runs (downstream needs an adapter)

def test_plan_prints_n_and_gpu_time_per_study(root, cli):
    r = cli("plan", "--model", root/"params"/"models"/"llama3-8b-instruct.yaml", "--target", "paper")
    assert r.returncode == 0, r.stderr
    blocks = dict(re.findall(r"^== (\w+)  \(unit: .*?\n(.*?)(?=^== |\Z)", r.stdout, re.S | re.M))
    assert set(STUDIES_RUN + ["downstream"]) <= set(blocks), r.stdout
    for s in STUDIES_RUN:
        for h in study_headlines(s):
            assert re.search(rf"^  {re.escape(h.metric)}: ", blocks[s], re.M), (s, h.metric, blocks[s])   # every headline has its line
            if h.kind == "performance": assert re.search(rf"^  {re.escape(h.metric)}: .*; n needed –;", blocks[s], re.M)   # no bias test to power
            elif h.metric not in NEEDS_REGENERATED_ITEMS:
                assert re.search(rf"^  {re.escape(h.metric)}: .*; n needed [\d,]+;", blocks[s], re.M), (s, h.metric, blocks[s])
        assert re.search(r"GPU at the target n [\d,]+: [\d,]+ generations, H100 [\d.]+ (s|min|h), A100-40GB [\d.]+ (s|min|h)", blocks[s]), blocks[s]
    # the issue's finding, now printed: the default samples cannot detect the papers' professions and narratives effects
    assert re.search(r"shift_high male: paper 14\.9 .*default n 80: power 0\.\d+, CANNOT detect", blocks["professions"])
    assert re.search(r"% positive high-low city: paper 7\.31 .*default n 160: power 0\.\d+, CANNOT detect", blocks["narratives"])
    assert "no effect to plan for" in blocks["downstream"] and "191%" in blocks["downstream"]   # said, not invented
    assert re.search(r"the 5 studies this model runs, at the target n: [\d,]+ generations", r.stdout)

def test_plan_default_target_and_errors(cli, tmp_path):
    r = cli("plan", "--model", Path("params/models/llama3-8b-instruct.yaml").absolute(), "--target", "default", "--n-boot", "20", "--csv", tmp_path/"p.csv")
    assert r.returncode == 0, r.stderr
    assert "GPU at the target n 60: 180 generations" in r.stdout   # normative: 60 scenarios = 180 answers, the local base's sample
    h = pd.read_csv(tmp_path/"p.csv")
    assert len(h) == len(card_headlines()) and {"n_needed", "power_default", "power_paper", "source", "sd_source"} <= set(h.columns)
    assert cli("plan", "--model", tmp_path/"absent.yaml").returncode == 2

def test_normal_power_textbook_values():
    assert normal_n(0.5, 1.0) == 32                    # one-sample z test, d = 0.5: (1.96 + 0.84)^2 / 0.25 = 31.4
    assert normal_n(0.5, np.sqrt(2)) == 63             # two groups of 63 at d = 0.5 (the t test's "64 per group")
    assert normal_n(-0.5, 1.0) == 32 and normal_n(0.0, 1.0) is None
    assert normal_power(0.5, 1.0, 32) >= 0.8 > normal_power(0.5, 1.0, 31)
    assert normal_power(0.0, 1.0, 50) == pytest.approx(0.05)

def test_exact_mcnemar_matches_closed_form_and_simulation():
    # every change one way: the exact test rejects iff at least 6 pairs changed, so power = P(Bin(n, p10) >= 6)
    for n, p in [(240, 0.02), (100, 0.07), (1000, 0.004)]: assert mcnemar_power(n, p) == pytest.approx(binom.sf(5, n, p), abs=1e-12)
    rng = np.random.default_rng(3)
    d = rng.multinomial(150, [0.12, 0.05, 0.83], size=20000)
    sim = np.mean([2*binom.cdf(min(b, c), b + c, 0.5) <= 0.05 if b + c else False for b, c, _ in d])
    assert sim == pytest.approx(mcnemar_power(150, 0.12, 0.05), abs=0.01)
    n = mcnemar_n(0.12, 0.05)
    assert mcnemar_power(n, 0.12, 0.05) >= 0.8 > mcnemar_power(n - 1, 0.12, 0.05)

def test_mcnemar_mde_is_what_the_card_width_mde_hides():
    m = mcnemar_mde(240)                                 # downstream's default: 240 BBQ items
    assert mcnemar_power(240, m) == pytest.approx(0.8, abs=1e-3) and 0.03 < m < 0.036
    assert min_detectable_effect(0.0, 0.013574660633484115) < m/3   # the card's CI-width MDE at the SmolLM2 run's [0, 0.0136]
    assert mcnemar_mde(BBQ_ITEMS) < 0.001

def test_unit_sd_on_constructed_data():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2.0, 500)
    items = pd.DataFrame({"item": np.repeat(np.arange(500), 3), "x": np.repeat(x, 3)})   # 3 identical answers per unit
    sd, C = unit_sd(items, lambda d: {"mean": d.x.mean()}, "mean", n_boot=400)
    assert C == 500 and sd == pytest.approx(x.std(), rel=0.1)      # the unit's SD, not the answer's sqrt(3)-smaller one
    ratio = pd.DataFrame({"item": np.arange(400), "a": rng.poisson(5, 400), "b": rng.poisson(5, 400)})
    reps, C = headline_replicates(ratio, lambda d: {"r": d.a.sum()/d.b.sum()}, n_boot=300)
    assert replicate_sd(reps, "r", C, log=True) == pytest.approx(np.sqrt(C)*np.sqrt(2/(5*400)), rel=0.15)   # log ratio of Poisson sums

def test_paper_effects_and_binomial_floor():
    e = {h.metric: paper_effect(h) for h in card_headlines()}
    assert round(e["shift_high female"]["value"], 1) == 10.3 and round(e["shift_high male"]["value"], 1) == 14.9
    assert round(e["% positive high-low city"]["value"], 1) == 7.3
    assert e["CKC lower-upper"]["value"] == pytest.approx(-0.0235)   # median of Table 2's six CKC lower- minus upper-end differences
    assert np.isnan(e["P"]["effect"]) and e["P"]["source"].startswith("a performance level (ideal 1)")   # STOP's P is no bias contrast
    assert all(e[m]["source"] for m in e) and e["p_agentic m-f"]["stand_in"] and not e["OR Agentic"]["stand_in"]
    # narratives: 16 cells of N/16 stories, each Bernoulli at Table 4's % positive: SD per story = sqrt(sum pq / 4)
    from silverspoon.studies.silverspoon.narratives import PAPER_TABLE4
    p = np.array([v[2] for v in PAPER_TABLE4.values()])/100
    assert paper_binomial_sd("narratives", "% positive high-low city") == pytest.approx(100*np.sqrt((p*(1 - p)).sum()/4))

def test_scale_paper_writes_the_papers_n_and_leaves_committed_runs_alone(root, tmp_path):
    shutil.copytree(root/"params", tmp_path/"params")
    before = {f: f.read_bytes() for f in (tmp_path/"params").rglob("*.yaml")}
    plan = scale_plan(tmp_path/"params"/"models"/"smollm2-135m.yaml", root=tmp_path, write=True).set_index("study")   # as `run --scale paper` writes them
    assert {f: f.read_bytes() for f in (tmp_path/"params").rglob("*.yaml")} == before   # no committed params file touched
    for s in STUDIES_RUN + ["downstream"]:
        m = read_params_mapping(tmp_path/plan.params[s])
        assert plan.run[s].endswith("-paper") and m["run"] == plan.run[s]                 # its own report folder and store file
        assert sample_units(s, m) == sample_units(s, get_study(s).paper_scale)
    assert read_params_mapping(tmp_path/plan.params["normative"])["sample"]["n"] == 3000
    assert read_params_mapping(tmp_path/plan.params["stop"])["sample"]["n"] == 450
    assert read_params_mapping(tmp_path/plan.params["professions"])["sample"]["n"] == 8000
    d = read_params_mapping(tmp_path/plan.params["downstream"])["task"]
    assert d["bbq_n"] is None and d["crows_n"] is None and d["adapter"]   # every item present; the adapter kept from the run file
    assert plan.status["stop_scale"].startswith("skipped: no paper scale")
    with pytest.raises(ParamsError, match="the one scale is `paper`"): scale_plan(tmp_path/"params"/"models"/"smollm2-135m.yaml", scale="huge", root=tmp_path)

def test_run_scale_paper_dry_run(cli, root):
    reports = sorted(p.name for p in (root/"reports"/"normative").iterdir())
    r = cli("run", "--model", root/"params"/"models"/"llama3-8b-instruct.yaml", "--scale", "paper", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "would run  normative  llama3-8b-instruct-paper" in r.stdout and "sample.n 3000 = 1,000 scenario units" in r.stdout
    assert "sample.n 8000 = 400 name units" in r.stdout and "5 runs validated; nothing was run" in r.stdout
    assert sorted(p.name for p in (root/"reports"/"normative").iterdir()) == reports
    assert cli("run", "--scale", "paper", "params/normative/smollm2-135m.yaml").returncode == 2   # --scale needs --model

def test_detect_line_answers_the_question_per_headline():
    h = {x.metric: x for x in card_headlines()}
    r = headline_power(h["shift_high male"], 80, 400, n_boot=30)
    assert detect_line(r).startswith("NO: 80 name units cannot detect the paper's effect (+14.9)") and "Singh et al. Table 3" in detect_line(r)
    assert detect_line(r, "paper").startswith("yes: 400 name units can")
    d = headline_power(h["answer rate change, BBQ (adapter - base)"], 240, BBQ_ITEMS)
    assert detect_line(d).startswith("no answer: paper: none") and d["n_needed"] is None


# --- issue 51 B14: every size checked once, the same error in plan, check, run and index; the model's max_new_tokens; CPU time
def _project(root, t:Path)->Path:
    "A project folder with the committed params and adapters and an empty reports/ (a model file in it is planned, not run)."
    shutil.copytree(root/"params", t/"params"); (t/"adapters").symlink_to(root/"adapters"); (t/"reports").mkdir()
    return t


@pytest.mark.parametrize("bad, said", [("{sample: {n: many}}", "field `sample.n` = 'many' must be one of: int, null."),
                                       ("{sample: {n: 100000000}}", "field `sample.n` = 100000000 is more than the 3000 items"),
                                       ("{generation: {max_new_tokens: -5}}", "field `generation.max_new_tokens` = -5 must be in [1, 1000000]."),
                                       ("{generation: {max_new_tokens: 4096.5}}", "field `generation.max_new_tokens` must be int, got float")])
def test_a_bad_size_in_a_model_file_is_one_error_in_plan_check_run_and_index(root, tmp_path, cli, monkeypatch, bad, said):
    t = _project(root, tmp_path/"p")
    monkeypatch.setenv("SILVERSPOON_ROOT", str(t))
    m = t/"params"/"models"/"new.yaml"
    m.write_text(f"name: new\nmodel: {{backend: hf, id: some/model, device: cpu}}\nstudies: {{normative: {bad}}}\n")
    for cmd in (["plan", "--model", m], ["check", m], ["run", "--dry-run", "--model", m], ["run", "--model", m], ["index", "--reports-dir", t/"reports"]):
        r = cli(*cmd)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert r.stderr.startswith(f"error: {m} (studies.normative): {said}"), (cmd, r.stderr)   # one place, one message
        assert "detects" not in r.stdout
    assert not (t/"tmp").exists()                                                               # and nothing written


def test_plan_times_use_the_models_max_new_tokens_and_a_measured_cpu_rate_for_device_cpu(root, tmp_path):
    from silverspoon.site.plan_page import plan_table, plan_text
    from silverspoon.site.plan import gpu_time_estimate
    head = "name: planned-x\nmodel: {backend: hf, id: some/model, device: %s}\n"
    (tmp_path/"gpu.yaml").write_text(head % "cuda")
    (tmp_path/"long.yaml").write_text(head % "cuda" + "studies: {normative: {generation: {max_new_tokens: 4096}}}\n")
    (tmp_path/"cpu.yaml").write_text(head % "cpu")
    g, l, c = (plan_table(tmp_path/f, "default", n_boot=20) for f in ("gpu.yaml", "long.yaml", "cpu.yaml"))
    gs, ls, cs = (p["studies"].set_index("study") for p in (g, l, c))
    base = read_params_mapping(root/"params"/"normative"/"_base-local.yaml")["generation"]["max_new_tokens"]
    assert (ls.max_new_tokens["normative"], gs.max_new_tokens["normative"]) == (4096, base)
    assert ls.h100_seconds_target["normative"] == pytest.approx(gs.h100_seconds_target["normative"]*4096/base)   # ~85x the 48-token time
    assert ls.h100_seconds_target["stop"] == gs.h100_seconds_target["stop"]                                       # no override: unchanged
    assert re.search(r"^  GPU at the target n 60: 180 generations, H100 .*; max_new_tokens 4,096$", plan_text(l), re.M)
    est = gpu_time_estimate().set_index("study")
    assert est.cpu_seconds.gt(0).all()                                   # the committed SmolLM2 runs' wall time, measured on a CPU
    assert est.run["normative"].endswith("-paper") and not est.run["professions"].endswith("-paper")   # the run the card's rows rest on, named
    from silverspoon.site.card import estimate_html
    page = estimate_html(est.reset_index())
    assert "papers' full item set" in page and f"<code>{est.run['normative']}</code>" in page   # the card says which run each row counts
    for s in ("normative", "stop"): assert cs.cpu_seconds_target[s] > 10*gs.h100_seconds_target[s]
    text = plan_text(c)
    assert "H100" not in text and "A100" not in text and "no rate is measured for some/model" in text
    assert re.search(r"^  CPU at the target n 60: 180 generations, at least [\d.]+ (s|min|h); max_new_tokens [\d,]+$", text, re.M), text


def test_plan_takes_a_pilot_runs_own_se_and_states_its_assumptions():
    "Issue 52 item 7: `plan --pilot RUN` powers each headline from that run's own SE, and the plan says where its SD and allocation come from."
    from silverspoon.site.headline_power import headline_sd, _run_replicates
    from silverspoon.site.plan_page import plan_text
    reports = Path(__file__).resolve().parent.parent/"reports"
    h = [x for x in card_headlines() if x.metric == "share favouring underprivileged - annotators"][0]
    s = headline_sd(h, reports, pilot="smollm2-135m")
    reps, units = _run_replicates(reports/"normative"/"smollm2-135m"/"items.csv", "normative", 100, 0)
    assert s["sd"] == pytest.approx(replicate_sd(reps, h.metric, units)) and s["sd_source"].startswith("pilot run smollm2-135m's own SE")
    plan = dict(headlines=pd.DataFrame(), studies=pd.DataFrame(), target="paper", name="m", power=0.8, alpha=0.05, device="auto", model_id="x")
    assert "assumptions: SD per unit from the released answers" in plan_text(plan) and "0.05 / its confirmatory tests" in plan_text(plan)
    assert "assumptions: SD per unit from the pilot run p1's own SE" in plan_text({**plan, "pilot": "p1"})
