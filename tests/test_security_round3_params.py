"""Red-team round 3 (issue 31), params findings, each replayed: a model file or a copied run file must never write over a
report (or into a store) that another params file made; `check` reads model files and says where their keys go; names
that collide with other runs or internal folders are refused. Every attack runs in a copy of the project (params/, the
targeted committed reports and store files) and must end in one clear error (exit 2, file, field and fix named) with
the targeted files unchanged."""
import hashlib, shutil
from pathlib import Path
import pytest
import yaml
from conftest import run_cli

KEY = "sk-ant-" + hashlib.sha256(b"silverspoon issue 31").hexdigest()[:32]


def _one_clear_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


def _hashes(*paths)->dict:
    "sha256 of every file under each path (a folder or a file): what an attack must leave unchanged."
    out = {}
    for p in paths:
        for f in sorted([p] if p.is_file() else p.rglob("*")):
            if f.is_file(): out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    assert out, paths
    return out


@pytest.fixture
def project(root, tmp_path):
    "A copy of the project's params/, two committed reports (a replay run, a factor run) and the factor run's store file."
    t = tmp_path/"project"
    shutil.copytree(root/"params", t/"params")
    (t/"settings.ini").write_text((root/"settings.ini").read_text())
    for study, run in (("normative", "gpt4-replay"), ("narratives", "smollm2-135m--quantization-4bit")):
        shutil.copytree(root/"reports"/study/run, t/"reports"/study/run)
        for ext in (".html", ".ipynb"): shutil.copy(root/"reports"/study/f"{run}{ext}", t/"reports"/study/f"{run}{ext}")
    (t/"store"/"narratives").mkdir(parents=True)
    for f in (root/"store"/"narratives").glob("smollm2-135m--quantization-4bit*.jsonl"): shutil.copy(f, t/"store"/"narratives"/f.name)
    committed = [t/"reports"/"normative"/"gpt4-replay", t/"reports"/"normative"/"gpt4-replay.html", t/"reports"/"narratives", t/"store"]
    return dict(root=t, reports=t/"reports", env={"SILVERSPOON_ROOT": str(t), "SILVERSPOON_STORE": str(t/"store")},
                committed=committed, before=_hashes(*committed))


def _unchanged(project):
    assert _hashes(*project["committed"]) == project["before"]
    assert not (project["root"]/"store"/"normative").exists()


# --- finding 1: a model file's per-study override retargets another report ------------------------------------------

@pytest.mark.parametrize("override,needle", [
    ({"narratives": {"study": "normative", "run": "gpt4-replay", "sample": {"n": 30}}}, "field `studies.narratives.study` may not be set"),
    ({"normative": {"include": "../normative/_base-replay.yaml", "run": "gpt4-replay"}}, "field `studies.normative.include` may not be set"),
    ({"narratives": {"run": "smollm2-135m--quantization-4bit"}}, "field `studies.narratives.run` = 'smollm2-135m--quantization-4bit' names no run file"),
    ({"normative": {"run": "gpt4-replay"}}, "gpt4-replay.yaml: its model block differs from"),   # an existing run file: its model is compared
])
def test_model_file_override_cannot_retarget_a_committed_report(project, cli, override, needle):
    m = project["root"]/"params"/"models"/"attacker.yaml"
    m.write_text(yaml.safe_dump({"name": "attacker", "model": {"backend": "scripted", "id": "text:P2 is wrong."}, "studies": override}))
    for args in (["check", m], ["run", "--model", m, "--studies", ",".join(override), "--reports-dir", project["reports"]]):
        _one_clear_error(cli(*args, env=project["env"]), str(m), needle)
    _unchanged(project)


def test_model_file_override_refused_by_the_installed_command(project):
    m = project["root"]/"evil.yaml"
    m.write_text("name: evil\nmodel: {backend: scripted, id: 'text:P2 is wrong.'}\n"
                 "studies: {narratives: {study: normative, run: gpt4-replay, sample: {n: 30}}}\n")
    r = run_cli("run", "--model", m, "--studies", "narratives", "--reports-dir", project["reports"], env=project["env"])
    _one_clear_error(r, str(m), "field `studies.narratives.study` may not be set", "Fix: remove `study:`")
    _unchanged(project)


# --- finding 2: a copied run file with its `run:` line kept ----------------------------------------------------------

def test_copied_run_file_cannot_overwrite_the_committed_report(project, cli):
    src = project["root"]/"params"/"normative"/"gpt4-replay.yaml"
    copy = project["root"]/"params"/"normative"/"gpt35-as-gpt4.yaml"
    copy.write_text(src.read_text().replace("id: GPT4 ", "id: GPT3.5 "))
    assert "run: gpt4-replay" in copy.read_text() and "id: GPT3.5" in copy.read_text()
    needles = (str(copy), "run `gpt4-replay` of study normative would overwrite", "params/normative/gpt4-replay.yaml",
               "Fix: give", "another `run:` name")
    _one_clear_error(cli("check", copy, env=project["env"]), *needles)
    _one_clear_error(cli("run", copy, "--reports-dir", project["reports"], env=project["env"]), *needles)
    _unchanged(project)
    # the file that made the report still checks (and may rerun over its own report)
    r = cli("check", src, env=project["env"])
    assert r.returncode == 0 and "ok    " in r.stdout, r.stderr


def test_copied_run_file_refused_by_the_installed_command(project):
    copy = project["root"]/"mine.yaml"
    copy.write_text("include: params/normative/_base-replay.yaml\nrun: gpt4-replay\nmodel: {id: Yi6B}\ntask: {prompt_style: yi}\n")
    r = run_cli("run", copy, "--reports-dir", project["reports"], env=project["env"])
    _one_clear_error(r, str(copy), "would overwrite", "params/normative/gpt4-replay.yaml")
    _unchanged(project)


def test_run_params_file_refuses_too(project, monkeypatch):
    "The library entry point (`run_params_file`) makes the same check before papermill starts."
    from silverspoon.core import ParamsError
    from silverspoon.site.runner import run_params_file
    for k, v in project["env"].items(): monkeypatch.setenv(k, v)
    copy = project["root"]/"params"/"normative"/"other.yaml"
    copy.write_text("include: _base-replay.yaml\nrun: gpt4-replay\nmodel: {id: Alpaca}\ntask: {prompt_style: llama}\n")
    with pytest.raises(ParamsError, match="which was made from another params file, params/normative/gpt4-replay.yaml"):
        run_params_file(copy, project["reports"])
    _unchanged(project)


def test_model_file_and_run_file_of_one_run_refused_by_check(project, cli):
    m = project["root"]/"mine.yaml"
    m.write_text("name: mine\nmodel: {backend: scripted, id: 'text:P1 is wrong.'}\n")
    other = project["root"]/"elsewhere"/"mine.yaml"; other.parent.mkdir()
    other.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\n")
    r = cli("check", m, other, env=project["env"])
    _one_clear_error(r, "are both run `mine` of study normative", "tmp/models/mine/normative.yaml", str(other))


# --- finding 9: `check` reads model files and names where keys go ----------------------------------------------------

def test_check_reads_the_committed_model_file(root, cli):
    r = cli("check", root/"params"/"models"/"smollm2-135m.yaml")
    assert r.returncode == 0, r.stderr
    assert "unknown field" not in r.stdout + r.stderr
    assert "(model smollm2-135m: " in r.stdout and "; no API key)" in r.stdout


def test_check_shows_each_key_and_its_server_never_the_key(project, cli):
    m = project["root"]/"params"/"models"/"claude.yaml"
    m.write_text("name: claude\nmodel: {backend: openai, id: claude-x, base_url: 'https://api.anthropic.com/v1', api_key_env: ANTHROPIC_API_KEY}\n")
    r = cli("check", m, env={**project["env"], "ANTHROPIC_API_KEY": KEY})
    assert r.returncode == 0, r.stderr
    assert f"ok    {m}  (model claude: " in r.stdout and "key $ANTHROPIC_API_KEY -> https://api.anthropic.com/v1" in r.stdout, r.stdout
    assert KEY not in r.stdout + r.stderr


# --- finding 7: names that collide ------------------------------------------------------------------------------------

def test_two_model_files_with_one_name_refused(project, cli):
    a, b = project["root"]/"a.yaml", project["root"]/"b.yaml"
    for f in (a, b): f.write_text("name: twin\nmodel: {backend: scripted, id: 'text:P1.'}\n")
    _one_clear_error(cli("check", a, b, env=project["env"]), str(a), str(b), "are both model `twin` (field `name`)", "another `name:`")
    # a model file named like a committed one (params/models/smollm2-135m.yaml) would share its runs and card
    c = project["root"]/"c.yaml"; c.write_text("name: smollm2-135m\nmodel: {backend: scripted, id: 'text:P1.'}\n")
    for args in (["check", c], ["run", "--model", c, "--studies", "narratives", "--reports-dir", project["reports"]]):
        _one_clear_error(cli(*args, env=project["env"]), str(c), "field `name` = 'smollm2-135m' is also the name of", "smollm2-135m.yaml")
    _unchanged(project)


def test_per_study_override_beside_a_run_file_is_an_error(project, cli):
    (project["root"]/"params"/"normative"/"mine.yaml").write_text("include: _base-local.yaml\nmodel: {backend: scripted, id: 'text:P1.'}\n")
    m = project["root"]/"params"/"models"/"mine.yaml"
    m.write_text("name: mine\nmodel: {backend: scripted, id: 'text:P1.'}\nstudies: {normative: {sample: {n: 3}}}\n")
    _one_clear_error(cli("check", m, env=project["env"]), str(m), "field `studies.normative` sets ['sample']",
                     "params/normative/mine.yaml exists", "would be ignored")


def test_run_named_like_a_failure_page_refused(project, cli):
    f = project["root"]/"victim.failed.yaml"
    f.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\n")
    _one_clear_error(cli("check", f, env=project["env"]), str(f), "field `run` = 'victim.failed' ends in '.failed'", "Fix: choose a run name")


# --- finding 14: the working folder's notebooks are never executed ---------------------------------------------------

def test_notebooks_of_the_working_folder_never_run(root, tmp_path, monkeypatch, cli):
    import nbformat, papermill
    evil, pwned = tmp_path/"evil", tmp_path/"pwned"
    (evil/"nbs").mkdir(parents=True)
    (evil/"settings.ini").write_text("[DEFAULT]\nlib_name = silverspoon\n")     # looks like a silverspoon checkout
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"open({str(pwned)!r}, 'w').write('x')")]), str(evil/"nbs"/"10_normative.ipynb"))
    f = evil/"r.yaml"; f.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\nsample: {n: 30}\n")
    seen = []
    def execute(nb_path, out_path, **kw):   # what would run (its cells), recorded; the run stops here
        seen.append(([c.source for c in nbformat.read(nb_path, as_version=4).cells], kw["cwd"])); raise RuntimeError("stopped by the test")
    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.chdir(evil)
    r = cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    from silverspoon.site.runner import without_examples
    own = without_examples(nbformat.read(str(root/"nbs"/"10_normative.ipynb"), as_version=4))
    assert seen == [([c.source for c in own.cells], str(root/"nbs"))], seen[0][1]   # the package's own notebook (the run's copy without examples), run from its own folder
    assert f"notebooks  {root/'nbs'}  (the installed silverspoon's own; never those of the project {evil}" in r.stdout, r.stdout
    assert r.returncode == 1 and "stopped by the test" in r.stderr and not pwned.exists()
