"SmolLM2-135M at the papers' scale (issue 55): the committed paper-scale run files are this model's own runs, `run --scale paper` runs them as they are, and the card prefers them to the default (pilot) runs."
import shutil
import pytest
from silverspoon.site.plan import scale_plan, model_run_names, model_params_files, PAPER_SCALE_SUFFIX
from silverspoon.core import read_params_mapping

PAPER_RUNS = {"normative": 3000, "stop": 450}   # committed: params/<study>/smollm2-135m-paper.yaml, sample.n = the study's paper scale

def test_committed_paper_scale_files_are_the_models_own_runs(root):
    for study, n in PAPER_RUNS.items():
        f = f"params/{study}/smollm2-135m{PAPER_SCALE_SUFFIX}.yaml"
        assert read_params_mapping(root/f)["sample"]["n"] == n
        assert f in model_params_files("smollm2-135m", study, root=root)            # its provenance makes it this model's run
        assert f not in model_params_files("llama3-8b-instruct", study, root=root)  # and no other model's

def test_the_card_prefers_the_paper_scale_run_to_its_pilot():
    names = model_run_names("smollm2-135m", "normative", declared={})
    assert names == ["smollm2-135m-paper", "smollm2-135m"]

def test_scale_paper_runs_a_committed_paper_file_as_it_is(root, tmp_path):
    shutil.copytree(root/"params", tmp_path/"params")
    plan = scale_plan(tmp_path/"params"/"models"/"smollm2-135m.yaml", root=tmp_path, write=True).set_index("study")
    for study in PAPER_RUNS:
        assert plan.params[study] == f"params/{study}/smollm2-135m-paper.yaml" and plan.status[study] == "run file (paper scale)"
        assert not (tmp_path/"tmp"/"models"/"smollm2-135m"/"paper"/f"{study}.yaml").exists()
    assert plan.params["professions"] == "tmp/models/smollm2-135m/paper/professions.yaml"   # no committed paper file: written
    # a paper file that loads another model is not this model's: it is written afresh under tmp/
    f = tmp_path/"params"/"stop"/"smollm2-135m-paper.yaml"
    f.write_text(f.read_text().replace('gguf_file: SmolLM2-135M-Instruct.Q4_1.gguf', 'gguf_file: other.gguf'))
    plan = scale_plan(tmp_path/"params"/"models"/"smollm2-135m.yaml", studies=["stop"], root=tmp_path).set_index("study")
    assert plan.params["stop"] == "tmp/models/smollm2-135m/paper/stop.yaml"

def test_the_committed_card_says_which_rows_rest_on_the_papers_scale_and_why_professions_does_not(root):
    "Issue 55 item 1: professions at the default scale answers 423 of 1600, under the share a verdict needs, so it was not run at paper scale; the card says so, and names the paper-scale runs its normative and STOP rows rest on."
    card = (root/"reports"/"models"/"smollm2-135m.html").read_text(encoding="utf-8")
    assert "<h3>Scale</h3>" in card
    assert "<b>normative</b>: the papers' full item set (smollm2-135m-paper" in card and "<b>stop</b>: the papers' full item set (smollm2-135m-paper" in card
    assert "<b>professions</b>: the default sample only. Not run at the papers' scale: its default run gave 423 of 1600 answered" in card
