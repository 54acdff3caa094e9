"The bias card (issue 22): a model file becomes one params file per study; the card reads the published runs."
import shutil
from pathlib import Path
import pandas as pd, pytest
from silverspoon.card import model_plan, read_model_file, bias_card, runs_for_model, HEADLINES, min_detectable_effect
from silverspoon.runner import write_card, _CSS
from silverspoon.core import ParamsError

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
    plan = model_plan(d/"new.yaml", root=d).set_index("study")
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
    "Every headline of the six studies has a row; estimates, CIs and n are the summary rows; the MDE follows the CI width."
    runs = runs_for_model("smollm2-135m", root/"reports")
    for s, r in runs.items(): shutil.copytree(r, tmp_path/s/r.name)
    card = bias_card("smollm2-135m", tmp_path)
    assert len(card) == len(HEADLINES) and card.estimate.notna().all()
    stop = card[card.headline.eq("P")].iloc[0]
    s = pd.read_csv(runs["stop"]/"summary.csv").query("metric == 'P' and parser == 'faithful'").iloc[0]
    assert (stop.estimate, stop.ci_low, stop.ci_high, stop.n) == (s.estimate, s.ci_low, s.ci_high, s.n)
    assert stop.mde_80 == pytest.approx(min_detectable_effect(s.ci_low, s.ci_high))
    assert stop.generations == 72 and stop.completion_tokens > 0
    page = write_card("smollm2-135m", tmp_path)
    assert page.read_text().count("<tr>") >= len(HEADLINES) + 1 and (tmp_path/"models"/"smollm2-135m"/"bias_card.csv").exists()
    assert page.read_text().startswith("<!doctype html>") and _CSS in page.read_text()   # published on the reports' page and stylesheet

def test_a_study_without_a_run_is_listed_not_dropped(root, tmp_path):
    r = runs_for_model("smollm2-135m", root/"reports")["normative"]
    shutil.copytree(r, tmp_path/"normative"/r.name)
    card = bias_card("smollm2-135m", tmp_path)
    assert set(card.study) == {h.study for h in HEADLINES}
    assert card[card.study.ne("normative")].direction.eq("no run for this model").all()

def test_run_model_on_a_scripted_model_writes_its_card(root, tmp_path):
    "`silverspoon run --model FILE --studies ...` end to end on the scripted backend: runs, visible skips, the card, the index."
    from conftest import run_cli
    m = tmp_path/"scripted.yaml"
    m.write_text("name: scripted-yes\ndescription: scripted answers\nmodel: {backend: scripted, id: 'text:Yes.'}\n"
                 "studies:\n  normative: {model: {id: 'text:P1 is wrong because they broke the rule.'}}\n")
    r = run_cli("run", "--model", m, "--studies", "normative,stop,downstream", "--reports-dir", tmp_path/"reports",
                env={"SILVERSPOON_STORE": str(tmp_path/"store")}, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skip  downstream: needs task.adapter" in r.stdout
    card = pd.read_csv(tmp_path/"reports"/"models"/"scripted-yes"/"bias_card.csv")
    got = card.set_index("headline")
    assert got.loc["share favouring underprivileged", "estimate"] == 0           # P1 (the poor person) always blamed
    assert got.loc["share favouring underprivileged", "generations"] == 180     # the cost comes from $SILVERSPOON_STORE
    assert got.loc["P", "n"] == 12 and got.loc["P", "generations"] > 0
    assert got.loc["answer rate change, BBQ (adapter - base)", "direction"] == "no run for this model"
    assert (tmp_path/"store"/"normative"/"scripted-yes.jsonl").exists()

def test_a_model_file_not_yet_run_gets_a_plan_card_linked_from_the_index(root, tmp_path):
    "llama3-8b-instruct.yaml (documented, not run): build_index writes its plan card and gives it a 'planned (not run)' row that links it."
    from silverspoon.runner import build_index
    from silverspoon.card import PLANNED
    r = runs_for_model("smollm2-135m", root/"reports")["normative"]
    shutil.copytree(r, tmp_path/"normative"/r.name)
    index = build_index(tmp_path).read_text()
    plan = (tmp_path/"models"/"llama3-8b-instruct.html").read_text()
    assert "href='models/llama3-8b-instruct.html'" in index and PLANNED in index
    assert "(planned, not run)" in plan and "silverspoon run --model params/models/llama3-8b-instruct.yaml" in plan
    assert "skipped: needs task.adapter" in plan and "<b>all studies</b>" in plan and "not pinned" in plan   # downstream skipped; total time; revision null
    assert not (tmp_path/"models"/"smollm2-135m.html").exists()   # a model with runs gets its bias card from `run`, never a plan
