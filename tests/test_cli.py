"The `silverspoon` command: malformed params stop the run with one clear error and touch nothing."
import os, sys, shutil, subprocess
from pathlib import Path
import pytest
from conftest import run_cli

GOOD = "study: normative\nmodel: {backend: replay, id: GPT4}\n"

@pytest.mark.parametrize("text,needle", [
    ("study: normative\nmodel: {backend: replay, id: GPT4, batchsize: 4}\n", "unknown field `model.batchsize`"),
    ("study: normative\nmodel: {backend: hf, id: m, batch_size: eight}\n", "field `model.batch_size` = 'eight' must be one of: int, 'auto'"),
    # a field only other backends read: refused, naming them (issue 53: each backend declares its settings)
    ("study: normative\nmodel: {backend: replay, id: GPT4, batch_size: 4}\n", "field `model.batch_size` is set but backend 'replay' asks no model"),
    ("study: normative\nmodel: {backend: openai, id: m, dtype: float16}\n", "field `model.dtype` is set but backend 'openai' does not read it; it is read by backend hf, vllm only"),
    ("study: normative\nmodel: {backend: hf, id: m, base_url: 'http://localhost:8000/v1'}\n", "it is read by backend openai only. Fix: remove `base_url`"),
    ("study: normative\nmodel: {backend: tgi, id: m}\n", "field `model.backend` = 'tgi' is not allowed"),
    ("study: nope\nmodel: {backend: replay, id: GPT4}\n", "field `study` = 'nope' is unknown"),
    ("study: normative\n", "required field `model` is missing"),
    ("study: normative\nmodel: [1, 2\n", "not valid YAML"),
    # semantic errors are caught before any run too
    ("study: normative\nrun: ../../escape\nmodel: {backend: replay, id: GPT4}\n", "field `run`"),
    ("study: normative\nmodel: {backend: replay, id: NotAModel}\n", "is not a released column"),
    ("study: normative\nmodel: {backend: replay, id: Yi6B}\ntask: {prompt_style: gpt}\n", "field `task.prompt_style`"),
    ("study: normative\nmodel: {backend: replay, id: GPT4}\nsample: {n: 2}\n", "field `sample.n` = 2"),
    ("study: normative\nmodel: {backend: replay, id: GPT4}\nsample: {n: 30, stratify_by: colour}\n", "field `sample.stratify_by`"),
    ("study: normative\nmodel: {backend: hf, id: m}\ngeneration: {n_samples: 3}\n", "field `generation.n_samples` = 3"),
    ("study: normative\nmodel: {backend: openai, id: m, base_url: 'http://u:pw@localhost:8000/v1'}\n", "must not carry credentials"),
])
def test_bad_params_clear_error_and_nothing_touched(tmp_path, cli, text, needle):
    bad = tmp_path/"bad.yaml"; bad.write_text(text)
    good = tmp_path/"good.yaml"; good.write_text(GOOD)
    store, reports = tmp_path/"store", tmp_path/"reports"
    # the good file comes first: validation of every file happens before any run starts
    r = cli("run", good, bad, "--reports-dir", reports, env={"SILVERSPOON_STORE": str(store)})   # in this process: an uncaught exception fails the test
    assert r.returncode == 2, r.stderr
    assert str(bad) in r.stderr and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not store.exists() and not reports.exists()

def test_missing_params_file(tmp_path, cli):
    r = cli("check", tmp_path/"nope.yaml")
    assert r.returncode == 2 and "nope.yaml: params file not found" in r.stderr

def test_list_and_check_default_params(root, cli, monkeypatch):
    monkeypatch.chdir(root)   # `list` names files relative to the project, as `check` reads them
    r = cli("list"); assert r.returncode == 0
    files = r.stdout.split()
    assert "params/normative/gpt4-replay.yaml" in files and not any("examples" in f for f in files)
    ex = sorted(str(p) for p in (root/"params"/"examples").glob("*.yaml"))
    r = cli("check", *files, *ex); assert r.returncode == 0, r.stderr


def _defaults_of(cls)->dict:
    import dataclasses
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}

def test_every_default_params_file_gives_the_run_params_of_its_committed_report(root):
    "`include:` bases change no run: each file's validated RunParams equals the `params` in its committed report's provenance.json."
    import dataclasses, json
    from silverspoon.core import load_params, ModelParams, GenerationParams, SampleParams
    from silverspoon.site.cli import default_params_files
    files = default_params_files()
    assert any(f.read_text().startswith("#") and "include:" in f.read_text() for f in files)   # the bases are in use
    for f in files:
        params = load_params(f); p = dataclasses.asdict(params)
        prov = json.loads((root/"reports"/p["study"]/p["run"]/"provenance.json").read_text())["params"]
        for section, cls in (("model", type(params.model)), ("generation", GenerationParams), ("sample", SampleParams)):   # model: its backend's settings class
            added = set(p[section]) - set(prov[section])     # schema fields added after the report was made: still their default
            assert {k: p[section][k] for k in added} == {k: v for k, v in _defaults_of(cls).items() if k in added}, (f, section)
            p[section] = {k: v for k, v in p[section].items() if k not in added}
        p.pop("description"); prov.pop("description")
        assert p == prov, f

def test_bases_are_not_runs_and_include_errors_are_clear(tmp_path, root, cli):
    r = cli("list"); assert r.returncode == 0
    assert not any(Path(f).name.startswith("_") for f in r.stdout.split())
    assert (root/"params"/"stop"/"_base-replay.yaml").is_file() and (root/"params"/"normative"/"_base-replay.yaml").is_file()
    (tmp_path/"a.yaml").write_text("include: b.yaml\nmodel: {id: GPT4}\n"); (tmp_path/"b.yaml").write_text("include: a.yaml\n")
    (tmp_path/"c.yaml").write_text("include: _gone.yaml\n")
    for f, needle in [("a.yaml", "field `include` = 'a.yaml' makes a cycle"), ("c.yaml", "c.yaml: field `include` = '_gone.yaml': no file")]:
        r = cli("check", tmp_path/f)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    (tmp_path/"run.yaml").write_text(f"include: {root/'params'/'normative'/'_base-replay.yaml'}\nmodel: {{id: Yi6B}}\ntask: {{prompt_style: yi}}\n")
    r = cli("check", tmp_path/"run.yaml"); assert r.returncode == 0 and "(normative, replay:Yi6B)" in r.stdout, r.stderr

def test_relative_paths_mean_the_shell_folder_and_one_run_updates_the_index(tmp_path, root):
    "The docs' (nbs/guide_running.md) `export SILVERSPOON_DATA=../shared/data` is relative to where the command starts (the kernels run in nbs/); "
    "a model added as one file that includes a base runs, and one `run` puts it in the index."
    work = tmp_path/"work"; (work/"params"/"normative").mkdir(parents=True)
    shutil.copy(root/"params"/"normative"/"_base-replay.yaml", work/"params"/"normative")
    (work/"params"/"normative"/"new-model.yaml").write_text(
        "include: _base-replay.yaml\ndescription: a model added by a user\nmodel: {id: Yi6B}\ntask: {prompt_style: yi}\nsample: {n: 30}\n")
    data = os.path.relpath(Path(os.environ["SILVERSPOON_DATA"]).resolve(), work)
    assert not Path(data).is_absolute() and data.startswith("..")
    r = run_cli("run", "params/normative/new-model.yaml", "--reports-dir", "rep", cwd=work,
                env={"SILVERSPOON_DATA": data, "SILVERSPOON_STORE": "store"})
    assert r.returncode == 0, r.stderr + r.stdout
    assert (work/"rep"/"normative"/"new-model.html").is_file() and (work/"rep"/"normative"/"new-model"/"summary.csv").is_file()
    index = (work/"rep"/"index.html").read_text()
    assert "normative/new-model.html" in index and "validity.html" in index
    assert "new-model" in (work/"rep"/"validity.html").read_text()   # its parser's agreement is on the one validity page

def test_python_dash_m_cli_is_the_command():
    r = subprocess.run([sys.executable, "-m", "silverspoon.site.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage: silverspoon" in r.stdout and "run" in r.stdout, r.stderr

def test_the_command_imports_no_sklearn():
    "Every `silverspoon` command and every test that runs one starts a Python that imports the CLI: sklearn (1.5 s) loads only where an agreement metric needs it."
    r = subprocess.run([sys.executable, "-c", "import sys, silverspoon.site.cli; print('sklearn' in sys.modules)"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr

def test_local_bases_let_a_new_model_be_one_short_file(root):
    "Each study with a local default run has `_base-local.yaml`; the default SmolLM2 run is that base plus its model, nothing else."
    from silverspoon.core import read_params_mapping
    for f in sorted(f for f in root.glob("params/*/smollm2-135m*.yaml") if f.parent.name != "models"):   # params/models/ holds model files, not runs
        assert "include: _base-local.yaml" in f.read_text(), f
        own = {k for k in __import__("yaml").safe_load(f.read_text())} - {"include"}
        variant = {"sample", "task"} if f.stem == "smollm2-135m-stop-lora-heldout" else set()   # its held-out progressions and compare_base make it the variant it is
        if f.stem.endswith("-paper"): variant |= {"sample"}   # the paper-scale run: the study's `paper_scale` sample (issue 55)
        task = __import__("yaml").safe_load(f.read_text()).get("task") or {}
        if task and set(task) <= {"formality_model", "sentiment_model", "nli_model"} and not any(task.values()):
            variant |= {"task"}   # the stand-ins named instead of the base's `auto`: the committed report never depends on the hub
        assert own <= {"study", "run", "description", "model"} | variant, (f, own)
        assert read_params_mapping(f)["model"]["backend"] == "hf"


# --- issue 51 B13: `run --dry-run`, `plan`, `check` and `index` rewrote the tmp/models/ run files a running `run --model`
# reads; its next study ran with the edited setting. Read-only commands now write nothing; `run` runs what it checked.
def test_read_only_commands_write_nothing_a_running_run_reads(root, tmp_path, cli, monkeypatch):
    import inspect
    from silverspoon.site.plan import model_plan
    t = tmp_path/"p"
    shutil.copytree(root/"params", t/"params"); (t/"adapters").symlink_to(root/"adapters"); (t/"reports").mkdir()
    monkeypatch.setenv("SILVERSPOON_ROOT", str(t))
    m = t/"params"/"models"/"new.yaml"
    m.write_text("name: new\nmodel: {backend: hf, id: some/model}\nstudies: {normative: {sample: {n: 30}}}\n")
    model_plan(m, root=t, **({"write": True} if "write" in inspect.signature(model_plan).parameters else {}))   # `run --model` wrote its run
    # files (as on 06e24b4, where every caller wrote them) and is running them, one study after another
    running = {f: f.read_bytes() for f in (t/"tmp").rglob("*.yaml")}
    assert t/"tmp"/"models"/"new"/"normative.yaml" in running
    m.write_text(m.read_text().replace("n: 30", "n: 60"))   # meanwhile the model file is edited, and looked at again
    for cmd in (["run", "--dry-run", "--model", m], ["check", m], ["plan", "--model", m], ["index", "--reports-dir", t/"reports"]):
        cli(*cmd)
        assert {f: f.read_bytes() for f in (t/"tmp").rglob("*.yaml")} == running, f"{cmd[0]} rewrote a file the run reads"


def test_a_run_file_changed_after_the_check_is_not_run(root, tmp_path, monkeypatch):
    "A second `run --model` of an edited model file rewrites the run files: the first run refuses a file that is no longer what it checked."
    from silverspoon.run.executor import read_params_file, run_params_file
    from silverspoon.core import SilverspoonError
    f = tmp_path/"x.yaml"
    f.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\nsample: {n: 30}\n")
    checked = read_params_file(f)
    f.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\nsample: {n: 60}\n")
    with pytest.raises(SilverspoonError, match="changed since this command checked it"): run_params_file(f, tmp_path/"reports", expect=checked)
    assert not (tmp_path/"reports"/"normative"/"x").exists()


@pytest.mark.parametrize("args, option, lo, hi", [(["plan", "--model", "params/models/llama3-8b-instruct.yaml", "--n-boot", "-5"], "--n-boot", 1, 100000),
                                                   (["run", "--jobs", "0", "params/normative/gpt4-replay.yaml", "--dry-run"], "--jobs", 1, 1024),
                                                   (["annotate", "sheet", "{tmp}/sheets", "--annotators", "a", "--seed", "-1"], "--seed", 0, 4294967295),
                                                   (["audit", "sheet", "reports/normative/smollm2-135m", "--out", "{tmp}/audit", "--seed", "-1"], "--seed", 0, 4294967295)])
def test_a_negative_number_on_the_command_line_is_one_line_naming_the_option(cli, tmp_path, args, option, lo, hi):
    "Issue 51: `--seed -1` was a traceback. Every number on the command line is checked against its one range before anything runs."
    r = cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith(f"error: command line: field `{option}` = ") and line.endswith(f"must be in [{lo}, {hi}]."), line
    assert not list(tmp_path.iterdir())   # nothing written


def test_the_cli_takes_study_subcommands_from_the_study_record():
    "Issue 53: the CLI imports no study's own module; STOP's finetune and annotate come from its `Study.commands`, imported only when named."
    from test_imports import import_graph
    from silverspoon.studies import STUDY_REGISTRY
    paper_modules = {ref.split(":")[0].rsplit(".", 1)[0] for ref in STUDY_REGISTRY.values()}   # silverspoon.studies.stop, ...
    g = import_graph()
    named = sorted(m for m in g["silverspoon.site.cli"] if any(m == p or m.startswith(p + ".") for p in paper_modules))
    assert not named, f"site/cli.py imports study modules {named}: a study's subcommands come from its Study.commands"
    code = ("import sys, silverspoon.site.cli as c; c._parser('list'); a = 'silverspoon.studies.stop.stop_annotate' in sys.modules; "
            "c._parser('annotate'); print(a, 'silverspoon.studies.stop.stop_annotate' in sys.modules, 'silverspoon.studies.stop.stop_finetune' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split() == ["False", "True", "False"], r.stdout + r.stderr


def test_a_study_command_may_not_take_a_taken_name(monkeypatch):
    import dataclasses
    import silverspoon.studies as S
    stop = S.get_study("stop")
    clash = dataclasses.replace(stop, commands=(*stop.commands, S.StudyCommand("run", "x", "a:b", "a:c")))
    monkeypatch.setattr(S, "all_studies", lambda: [clash])
    with pytest.raises(TypeError, match="command 'run' is already a silverspoon command"): S.study_commands()
    twice = dataclasses.replace(stop, name="stop2", headlines=(), metrics=())
    monkeypatch.setattr(S, "all_studies", lambda: [stop, twice])
    with pytest.raises(TypeError, match="command 'finetune' is already brought by study 'stop'"): S.study_commands()
