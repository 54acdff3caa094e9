"""Attacks through params and run names (red-team issue 8; round 3, issue 31): params are data (never code), secrets never reach a
report, one run per report folder, model and run files that cannot retarget another run's report, names that become paths
(Windows, case, NUL bytes, failure pages), drafts, megabytes of free text, a hostile lock-holder record. Each attack ends in one
clear error (exit != 0, file, field and fix named, nothing written) or a safe outcome."""
import re, json, base64, hashlib, shutil
from pathlib import Path
import pytest
import yaml
from conftest import run_cli
from silverspoon.core import ParamsError, load_params
from silverspoon.run.executor import read_params_file
from silverspoon.testing import FakeChatServer


# ----------------------------------------------------------------------------------------------------
# Params are data; secrets, bounds, one run per folder, escaped HTML, failed reruns (was tests/test_security_params.py)
SECRET = "sk-test-" + hashlib.sha256(b"silverspoon issue 8").hexdigest()[:24]
GOOD = "study: normative\nmodel: {backend: replay, id: GPT4}\n"


def _payload(target:Path)->str:
    "A value that runs `touch target` if it is ever written unquoted into the injected parameters cell."
    return f'"+str(__import__("os").system("touch {target}"))[:0]+"'


def _nothing_written(*paths): return not any(Path(p).exists() for p in paths)


def _one_clear_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


# --- 1. params are data, never code ---------------------------------------------------------------------------------

def test_binary_tag_code_execution_refused(tmp_path, cli):
    pwned = tmp_path/"pwned"
    b64 = base64.b64encode(_payload(pwned).encode()).decode()
    f = tmp_path/"attack.yaml"
    f.write_text(f"study: normative\nmodel: {{backend: replay, id: GPT4}}\ntask:\n  judge_generation:\n    seed: !!binary {b64}\n")
    store, reports = tmp_path/"store", tmp_path/"reports"
    for call, args in ((cli, ["check", f]), (run_cli, ["run", f, "--reports-dir", reports])):   # `run` as a real command
        r = call(*args, env={"SILVERSPOON_STORE": str(store)})
        _one_clear_error(r, str(f), "field `task.judge_generation.seed` (line 5) has the YAML tag 'tag:yaml.org,2002:binary'")
    assert _nothing_written(pwned, store, reports)


@pytest.mark.parametrize("value,needle", [
    ("!!python/object/apply:os.system ['true']", "python/object/apply"),
    ("2024-01-01", "put the date in quotes"),
    ("!!set {a, b}", "tag:yaml.org,2002:set"),
    ("!!omap [{a: 1}]", "tag:yaml.org,2002:omap"),
    ("!custom x", "'!custom'"),
    (".inf", "is not a finite number"),
])
def test_only_plain_data_loads(tmp_path, value, needle):
    f = tmp_path/"p.yaml"; f.write_text(f"study: normative\nmodel: {{backend: replay, id: GPT4}}\ndescription: {value}\n")
    with pytest.raises(ParamsError) as e: read_params_file(f)
    assert str(f) in str(e.value) and "`description`" in str(e.value) and needle in str(e.value), e.value


def test_only_plain_data_reaches_papermill(tmp_path, monkeypatch):
    # the last check sits right before papermill: a value that is not plain data never reaches the injected cell,
    # even if it got past validation
    import dataclasses, papermill, silverspoon.run.executor as runner
    p = load_params({"study": "normative", "run": "r", "model": {"backend": "replay", "id": "GPT4"}})
    monkeypatch.setattr(runner, "read_params_file", lambda path: dataclasses.replace(p, description=_payload(tmp_path/"x").encode()))
    called = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: called.append(1))
    with pytest.raises(ParamsError, match="field `description` is a bytes"): runner.run_params_file("r.yaml", tmp_path/"reports")
    assert not called and not (tmp_path/"reports").exists()


# --- 2. credentials and keys ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("judge,needle", [
    ({"backend": "openai", "id": "j", "base_url": f"https://user:{SECRET}@api.example.com/v1"}, "field `task.judge.base_url` must not carry credentials"),
    ({"backend": "openai", "id": "j", "base_url": f"https://api.example.com/v1?api_key={SECRET}"}, "field `task.judge.base_url` must not carry"),
    ({"backend": "openai", "id": "j", "api_key_env": SECRET}, "field `task.judge.api_key_env` must be the NAME"),
])
def test_credentials_in_any_url_or_key_field_refused(tmp_path, cli, judge, needle):
    f = tmp_path/"cred.yaml"
    f.write_text(yaml.safe_dump({"study": "normative", "model": {"backend": "replay", "id": "GPT4"}, "task": {"judge": judge}}))
    r = cli("run", f, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    _one_clear_error(r, str(f), needle)
    assert SECRET not in r.stdout + r.stderr                      # refused without echoing it
    assert _nothing_written(tmp_path/"reports", tmp_path/"store")


def test_key_in_model_api_key_env_not_echoed(tmp_path, cli):
    f = tmp_path/"key.yaml"; f.write_text(f"study: normative\nmodel: {{backend: openai, id: m, api_key_env: {SECRET}}}\n")
    r = cli("check", f)
    _one_clear_error(r, "field `model.api_key_env` must be the NAME")
    assert SECRET not in r.stdout + r.stderr


# --- 3. two params files, one run -----------------------------------------------------------------------------------

def test_two_files_same_run_refused_before_running(tmp_path, cli):
    (tmp_path/"a").mkdir(); (tmp_path/"b").mkdir()
    (tmp_path/"a"/"twin.yaml").write_text(GOOD)
    (tmp_path/"b"/"twin.yaml").write_text("study: normative\nmodel: {backend: replay, id: Yi6B}\ntask: {prompt_style: yi}\n")
    r = cli("run", tmp_path/"a"/"twin.yaml", tmp_path/"b"/"twin.yaml", "--reports-dir", tmp_path/"reports",
                env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    _one_clear_error(r, "are both run `twin` of study normative", str(tmp_path/"a"/"twin.yaml"), str(tmp_path/"b"/"twin.yaml"))
    assert _nothing_written(tmp_path/"reports", tmp_path/"store")
    # `check` finds the same problem before anyone runs
    _one_clear_error(cli("check", tmp_path/"a"/"twin.yaml", tmp_path/"b"/"twin.yaml"), "are both run `twin` of study normative")


# --- 4. fine-tuning names that become paths -------------------------------------------------------------------------

@pytest.mark.parametrize("check", [True, False])
def test_finetune_run_name_checked_before_training(tmp_path, root, cli, check):
    f = tmp_path/"ft.yaml"
    f.write_text("run: ../../../escaped-run\nmodel: {backend: hf, id: some/model}\ntrain: {max_steps: 1}\n")
    r = cli("finetune", f, *(["--check"] if check else []))
    _one_clear_error(r, str(f), "field `run` = '../../../escaped-run' must be a plain name")
    assert not (root/"finetune"/"../../../escaped-run").resolve().exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ft.yaml"]


# --- 10. bounds and clear errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,needle", [
    ("model: {backend: hf, id: m, batch_size: 1000000000000}\n", "field `model.batch_size` = 1000000000000 must be in [1, 4096]"),
    ("model: {backend: hf, id: m, batch_size: auto}\ngeneration: {max_new_tokens: 100000000000}\n", "field `generation.max_new_tokens` = 100000000000 must be in"),
    ("model: {backend: hf, id: m}\ngeneration: {do_sample: true, temperature: .nan}\n", "field `generation.temperature` = nan is not a finite number"),
    ("model: {backend: replay, id: GPT4}\ntask: {n_boot: 100000000000}\n", "field `task.n_boot` = 100000000000 must be in [1, 100000]"),
    ("model: {backend: replay, id: GPT4}\nsample: {n: 5000}\n", "field `sample.n` = 5000 is more than the 3000 items"),
    ("model: {backend: replay, id: GPT4}\ntask: {judge_generation: {max_new_tokens: 0}}\n", "field `task.judge_generation.max_new_tokens` = 0"),   # checked with no judge
    ("model: {backend: openai, id: m, timeout_s: .inf}\n", "field `model.timeout_s` = inf is not a finite number"),
    (f"run: {'r' * 300}\nmodel: {{backend: replay, id: GPT4}}\n", "(300 characters) must be a plain name of at most 100 characters"),
])
def test_out_of_bounds_values_refused(tmp_path, extra, needle):
    f = tmp_path/"b.yaml"; f.write_text("study: normative\n" + extra)
    with pytest.raises(ParamsError) as e: read_params_file(f)
    assert str(f) in str(e.value) and needle in str(e.value), e.value


def test_batch_size_auto_stays_valid(tmp_path):
    f = tmp_path/"auto.yaml"; f.write_text("study: normative\nmodel: {backend: hf, id: m, batch_size: auto}\n")
    assert read_params_file(f).model.batch_size == "auto"


def test_stop_sample_above_item_count_is_an_error():
    from silverspoon.studies.stop.stop import load_stop, select_progressions, restrict_progressions
    df = load_stop()
    with pytest.raises(ParamsError, match=f"sample.n = 500 is more than the {len(df)} progressions"): select_progressions(df, {"n": 500})
    few = restrict_progressions(df, ["stop-000", "stop-001"])
    with pytest.raises(ParamsError, match="sample.n = 3 is more than the 2 progressions"): select_progressions(few, {"n": 3})
    assert len(select_progressions(few, {"n": 2})) == 2


def test_cli_misuse_is_one_line(tmp_path, cli):
    long = tmp_path/("r" * 300)[:200]        # a file name may be long; the run name it gives is refused
    long = long.with_suffix(".yaml"); long.write_text(GOOD)
    _one_clear_error(cli("check", long), "must be a plain name of at most 100 characters")
    afile = tmp_path/"not-a-folder"; afile.write_text("x")
    good = tmp_path/"good.yaml"; good.write_text(GOOD)
    _one_clear_error(cli("run", good, "--reports-dir", afile), "is a file, not a folder")
    _one_clear_error(cli("index", "--reports-dir", tmp_path/"missing"), "does not exist")
    _one_clear_error(cli("index", "--reports-dir", afile), "is a file, not a folder")
    _one_clear_error(run_cli("index", "--reports-dir", tmp_path/"missing"), "does not exist")   # and as a real command
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([long.name, "not-a-folder", "good.yaml"])


# --- 2, 5, 9 end to end: a report, then a failed rerun of the same run -----------------------------------------------

@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    "A small report whose description carries markup, a key and a code-injection attempt; its model (on a local fake server) reads the key from the variable its params name."
    d = tmp_path_factory.mktemp("sec")
    pwned = d/"pwned"
    desc = f"<script>alert(1)</script> [x](javascript:alert(2)) <img src=x onerror=alert(3)> key {SECRET} {_payload(pwned)}"
    with FakeChatServer() as srv:   # only an openai model reads `api_key_env` (a replay model's would be refused as a field it does not read)
        params = {"study": "normative", "description": desc,
                  "model": {"backend": "openai", "id": "m", "base_url": srv.base_url, "api_key_env": "SILVERSPOON_TEST_API_KEY"},
                  "sample": {"n": 30, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 50}}
        f = d/"sec-run.yaml"; f.write_text(yaml.safe_dump(params))
        env = {"SILVERSPOON_TEST_API_KEY": SECRET, "SILVERSPOON_STORE": str(d/"store")}
        r = run_cli("run", f, "--reports-dir", d/"reports", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert srv.stats()["requests"] >= 30   # the key went to the server only
    return dict(dir=d, file=f, params=params, env=env, reports=d/"reports", pwned=pwned, result=r)


def _snapshot(folder:Path)->dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_report_escapes_params_and_never_runs_them(good_run):
    html = (good_run["reports"]/"normative"/"sec-run.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html                  # shown, as text
    assert "<script" not in html and 'href="javascript:' not in html and not re.search(r"<[^>]*onerror", html)   # no markup from params
    assert not good_run["pwned"].exists()


def test_key_values_scrubbed_from_everything_written(good_run):
    r = good_run["result"]
    assert SECRET not in r.stdout + r.stderr
    files = [p for p in good_run["dir"].rglob("*") if p.is_file() and p != good_run["file"]]
    assert {".html", ".ipynb", ".json", ".csv"} <= {p.suffix for p in files}
    for p in files: assert SECRET not in p.read_text(errors="ignore"), p
    prov = json.loads((good_run["reports"]/"normative"/"sec-run"/"provenance.json").read_text())
    assert "key ***" in prov["params"]["description"]


def test_failed_rerun_keeps_last_good_report(good_run, cli):
    reports, study = good_run["reports"], good_run["reports"]/"normative"
    before = _snapshot(study/"sec-run"); html_before = (study/"sec-run.html").read_bytes()
    index_before = (reports/"index.html").read_text()
    with FakeChatServer(fail_every=1, codes=(500,)) as srv:     # every judge call fails
        judge = {"backend": "openai", "id": "judge", "base_url": srv.base_url, "api_key_env": "SILVERSPOON_TEST_API_KEY",
                 "max_retries": 0, "timeout_s": 5.0, "concurrency": 2}
        f = good_run["file"]; first = f.read_text()   # the same file, edited (another file may not rerun its report: issue 31)
        f.write_text(yaml.safe_dump({**good_run["params"], "task": {"n_boot": 50, "judge": judge}}))
        try: r = cli("run", f, "--reports-dir", reports, env=good_run["env"])   # in this process: papermill's kernel is a process of its own
        finally: f.write_text(first)
        assert srv.stats()["requests"] >= 25
    assert r.returncode == 1, r.stdout + r.stderr                      # a judge that never answered fails the run
    assert "judge calls failed" in r.stderr and "the last good report" in r.stderr and "is kept" in r.stderr, r.stderr
    assert SECRET not in r.stdout + r.stderr
    # the report folder is the first run's, whole: no new generation counts, no judge table beside old tables
    assert _snapshot(study/"sec-run") == before and (study/"sec-run.html").read_bytes() == html_before
    failed = (study/"sec-run.failed.html").read_text()
    assert "LLM judge accounting" in failed and "judge calls failed" in failed     # the judge failures are counted and shown
    assert SECRET not in failed and SECRET not in (study/"sec-run.failed.ipynb").read_text()
    assert not [p for p in study.iterdir() if p.name.startswith(".")]            # no temporary folder left behind
    index = (reports/"index.html").read_text()                                  # rebuilt from the good summary only
    assert "normative/sec-run.failed.html" in index and "<table" in index
    assert index.split("<details>", 1)[1] == index_before.split("<details>", 1)[1]   # the study section below the models table: the good run's


# ----------------------------------------------------------------------------------------------------
# Model files and copied run files never overwrite another run's report; `check` reads model files (was tests/test_security_round3_params.py)
KEY = "sk-ant-" + hashlib.sha256(b"silverspoon issue 31").hexdigest()[:32]


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
    from silverspoon.run.executor import run_params_file
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
    from silverspoon.run.executor import without_examples
    own = without_examples(nbformat.read(str(root/"nbs"/"10_normative.ipynb"), as_version=4))
    assert seen == [([c.source for c in own.cells], str(root/"nbs"))], seen[0][1]   # the package's own notebook (the run's copy without examples), run from its own folder
    assert f"notebooks  {root/'nbs'}  (the installed silverspoon's own; never those of the project {evil}" in r.stdout, r.stdout
    assert r.returncode == 1 and "stopped by the test" in r.stderr and not pwned.exists()


# ----------------------------------------------------------------------------------------------------
# Drafts, NUL bytes, run names a file system confuses, free text, the index, the lock holder (was tests/test_security_round3_lows.py)


def _files(folder:Path)->dict:
    "sha256 of every file under `folder` (empty when it does not exist): what a refused run must leave as it was."
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.rglob("*")) if f.is_file()} if folder.exists() else {}


@pytest.fixture
def empty_project(root, tmp_path):
    "A copy of the project's params/ (and settings.ini) with its own reports/ and store/ folders."
    t = tmp_path/"project"
    shutil.copytree(root/"params", t/"params")
    (t/"settings.ini").write_text((root/"settings.ini").read_text())
    return dict(root=t, reports=t/"reports", store=t/"store", env={"SILVERSPOON_ROOT": str(t), "SILVERSPOON_STORE": str(t/"store")})


def _scripted_run(empty_project, name:str="mine", **fields)->Path:
    "A small normative run file with a scripted model (never run by these tests: each is refused before anything runs)."
    f = empty_project["root"]/f"{name}.yaml"
    f.write_text(yaml.safe_dump({"study": "normative", "model": {"backend": "scripted", "id": "text:P1"}, "sample": {"n": 6}, **fields}))
    return f


# --- a malformed draft in params/models/ ------------------------------------------------------------------------------

def test_draft_model_file_stops_a_run_before_anything_is_published(empty_project, cli):
    "A half-written params/models/draft.yaml used to fail every run's index after its reports were published (exit 2)."
    draft = empty_project["root"]/"params"/"models"/"draft.yaml"
    draft.write_text("name: draft\nmodel: {backend: hf, id: \n  studies: [\n")   # saved mid-edit
    f = _scripted_run(empty_project)
    r = cli("run", f, "--reports-dir", empty_project["reports"], env=empty_project["env"])
    _one_clear_error(r, str(draft), "not valid YAML", "keep drafts outside params/models/", "--no-index", "nothing was run or written")
    assert _files(empty_project["reports"]) == {} and _files(empty_project["store"]) == {}
    _one_clear_error(cli("index", "--reports-dir", empty_project["reports"].parent, env=empty_project["env"]), str(draft))   # the index says the same


# --- a NUL byte in a path field ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,text,field", [
    ("run", 'include: "_base-replay\\0.yaml"\nstudy: normative\nmodel: {backend: replay, id: GPT4}\n', "include"),
    ("run", 'study: normative\nmodel: {backend: hf, id: "models/x\\0y", chat_template: chatml}\n', "model.id"),
    ("run", 'study: stop\nmodel: {backend: replay, id: GPT4}\ntask: {human_file: "ann\\0.csv"}\n', "task.human_file"),
    ("model", 'name: nul\nmodel: {backend: hf, id: "a\\0b"}\n', "model.id"),
    ("finetune", 'model: {backend: hf, id: x}\ndata: {source: jsonl, train_file: "/tmp/t\\0.jsonl"}\n', "data.train_file"),
])
def test_nul_byte_in_a_path_field_is_one_clear_error(empty_project, cli, kind, text, field):
    "A YAML \"\\0\" in `include:` used to end in a ValueError traceback (embedded null byte) from the file system."
    f = empty_project["root"]/("params/models/nul.yaml" if kind == "model" else f"{kind}.yaml")
    f.write_text(text)
    assert "\\0" in f.read_text()
    needles = (str(f), f"field `{field}` holds a NUL byte", "Fix: remove it")
    calls = {"run": [["check", f], ["run", f, "--reports-dir", empty_project["reports"]]],
             "model": [["check", f], ["run", "--model", f, "--studies", "normative", "--reports-dir", empty_project["reports"]]],
             "finetune": [["finetune", "--check", f], ["finetune", f]]}[kind]
    for args in calls: _one_clear_error(cli(*args, env=empty_project["env"]), *needles)
    assert _files(empty_project["reports"]) == {} and _files(empty_project["store"]) == {} and not (empty_project["root"]/"finetune").exists()


# --- a megabyte of free text ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["description", "task.prompt", "model file description"])
def test_megabyte_of_free_text_is_refused_before_the_run(empty_project, cli, where):
    "A 1 MB `description:` used to make a 3.5 MB executed notebook, past the 1.5 MB notebook budget."
    big = "x" * 1_000_000   # 1 MB: what the finding wrote (the file stays under the 1 MiB params-file cap)
    if where == "model file description":
        f = empty_project["root"]/"params"/"models"/"wordy.yaml"
        f.write_text(yaml.safe_dump({"name": "wordy", "description": big, "model": {"backend": "scripted", "id": "text:P1"}}))
        calls, field = [["check", f], ["run", "--model", f, "--studies", "narratives", "--reports-dir", empty_project["reports"]]], "description"
    else:
        top, _, sub = where.partition(".")
        f = _scripted_run(empty_project, study="narratives", **({top: {sub: big}} if sub else {top: big}))
        calls, field = [["check", f], ["run", f, "--reports-dir", empty_project["reports"]]], where
    for args in calls:
        _one_clear_error(cli(*args, env=empty_project["env"]), str(f), f"field `{field}` is {len(big):,} characters long", "at most 2,000", "Fix: shorten it")
    assert _files(empty_project["reports"]) == {} and _files(empty_project["store"]) == {}
    f.write_text(f.read_text().replace(big, "A story of {name} from {city}."))   # the same file with a sentence passes
    assert cli("check", f, env=empty_project["env"]).returncode == 0


# --- run names that Windows or a case-insensitive file system reads as another file -----------------------------------

@pytest.mark.parametrize("run,needle", [
    ("CON", "is a reserved device name on Windows (CON"), ("con", "(CON"), ("nul.txt", "(NUL, with any extension"),
    ("Com7", "(COM7"), ("lpt1.v2", "(LPT1"), ("gpt4-replay.", "ends in a dot, which Windows drops ('gpt4-replay' would be"),
])
def test_run_names_windows_cannot_write_are_refused(empty_project, cli, run, needle):
    "`CON` and `gpt4-replay.` used to pass `silverspoon check`; as run names (field `run:` or the file name) they are refused."
    by_field = _scripted_run(empty_project, name="by-field", run=run)
    by_stem = empty_project["root"]/f"{run}.yaml"; by_stem.write_text(by_field.read_text().replace(f"run: {run}\n", "").replace(f"run: '{run}'\n", ""))
    assert "run:" not in by_stem.read_text()
    for f in (by_field, by_stem):
        for args in (["check", f], ["run", f, "--reports-dir", empty_project["reports"]]):
            _one_clear_error(cli(*args, env=empty_project["env"]), str(f), f"field `run` = {run!r}", needle, "Fix:")
    m = empty_project["root"]/"params"/"models"/"dev.yaml"   # a model file's `name:` names its card file: the same rule
    m.write_text(f"name: '{run}'\nmodel: {{backend: scripted, id: 'text:P1'}}\n")
    _one_clear_error(cli("check", m, env=empty_project["env"]), str(m), f"field `name` = {run!r}", needle)
    assert _files(empty_project["reports"]) == {} and _files(empty_project["store"]) == {}


def test_run_name_differing_only_in_case_from_a_published_run_is_refused(empty_project, root, cli):
    "`GPT4-Replay` beside a committed `gpt4-replay` is one folder on macOS, Windows and a Drive mounted in Colab."
    committed = empty_project["reports"]/"normative"/"gpt4-replay"
    shutil.copytree(root/"reports"/"normative"/"gpt4-replay", committed)
    shutil.copy(root/"reports"/"normative"/"gpt4-replay.html", committed.parent/"gpt4-replay.html")
    before = _files(empty_project["reports"])
    f = empty_project["root"]/"GPT4-Replay.yaml"
    f.write_text("include: params/normative/_base-replay.yaml\nmodel: {id: GPT3.5}\n")
    needles = (str(f), "field `run` = 'GPT4-Replay' differs only in case from the report of run 'gpt4-replay'", "case-insensitive", "Fix: give")
    for args in (["check", f], ["run", f, "--reports-dir", empty_project["reports"]]):   # check looks in <project>/reports
        _one_clear_error(cli(*args, env=empty_project["env"]), *needles)
    assert _files(empty_project["reports"]) == before and _files(empty_project["store"]) == {}
    # a store file of that name (a run that never published) counts the same
    (empty_project["store"]/"normative").mkdir(parents=True); (empty_project["store"]/"normative"/"mine.jsonl").write_text("")
    g = empty_project["root"]/"MINE.yaml"; g.write_text("include: params/normative/_base-replay.yaml\nmodel: {id: GPT3.5}\n")
    _one_clear_error(cli("run", g, "--reports-dir", empty_project["reports"], env=empty_project["env"]), str(g), "differs only in case from the store of run 'mine'")
    # two files of one batch whose names differ only in case
    a, b = empty_project["root"]/"x"/"twin.yaml", empty_project["root"]/"y"/"Twin.yaml"
    for p in (a, b): p.parent.mkdir(); p.write_text("include: ../params/normative/_base-replay.yaml\nmodel: {id: GPT3.5}\n")
    _one_clear_error(cli("check", a, b, env=empty_project["env"]), str(a), str(b), "runs `twin` and `Twin`, one name on a case-insensitive file system")


# --- runs with `--` in their names are in the index -------------------------------------------------------------------

def test_every_published_run_is_linked_from_the_index(empty_project, cli):
    "`pin--scripted` (an ordinary run with `--` in its name) used to be missing from the index; factor runs must be reachable too."
    import pandas as pd
    study = empty_project["reports"]/"normative"
    for run, est in (("pin--scripted", 0.25), ("plain", 0.5), ("smollm2-135m--reference", 0.75), ("smollm2-135m--quantization-4bit", 0.8)):
        (study/run).mkdir(parents=True)
        pd.DataFrame({"run": [run], "model": [run], "metric": ["share P1"], "estimate": [est], "ci_low": [est - 0.1],
                      "ci_high": [est + 0.1], "n": [30]}).to_csv(study/run/"summary.csv", index=False)
        (study/f"{run}.html").write_text("<p>report</p>")
    (empty_project["reports"]/"stop"/"m--prompt_variant-plain").mkdir(parents=True)   # a study with factor runs only
    (empty_project["reports"]/"stop"/"m--prompt_variant-plain.html").write_text("<p>report</p>")
    r = cli("index", "--reports-dir", empty_project["reports"], env=empty_project["env"])
    assert r.returncode == 0, r.stderr
    page = (empty_project["reports"]/"index.html").read_text()
    for link in ("normative/pin--scripted.html", "normative/plain.html", "normative/smollm2-135m--reference.html",
                 "normative/smollm2-135m--quantization-4bit.html", "stop/m--prompt_variant-plain.html"):
        assert f"href='{link}'" in page, link
    table = page[page.index("<h2>normative</h2>"):]
    table = table[table.index("<details>"):table.index("</details>")]
    assert "pin--scripted" in table and "plain" in table            # an ordinary run with `--`: a row of the study's table
    assert "smollm2-135m--reference" not in table                   # factor runs: linked, their numbers on the model's card


# --- a hostile lock-holder record -------------------------------------------------------------------------------------

def test_lock_holder_record_is_shown_short_and_sanitised(tmp_path, capsys, monkeypatch):
    "The lock file's record used to be printed raw: escape sequences, newlines and any length reached the terminal."
    import fcntl, json, os, threading, time
    from silverspoon.engine.store import GenerationStore, NOTICES_ENV
    monkeypatch.delenv(NOTICES_ENV, raising=False)
    store = tmp_path/"normative"/"mine.jsonl"; store.parent.mkdir()
    lock = os.open(store.with_name("mine.jsonl.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)   # another run holds the lock, and wrote this record
    hostile = {"pid": "\x1b[2J\x1b]0;owned\x07", "host": "evil\n\rhost\u202e" + "x" * 300, "since": "\x1b[31mnow\x1b[0m"}
    os.write(lock, json.dumps(hostile).encode())
    waiter = threading.Thread(target=lambda: GenerationStore(store).locked().__enter__())
    waiter.start()
    seen, t0 = "", time.monotonic()
    while "is generating into this store" not in seen and time.monotonic() - t0 < 60:
        time.sleep(0.05); seen += capsys.readouterr().err
    os.close(lock); waiter.join(60)   # the holder is done: the waiting run goes on
    seen += capsys.readouterr().err
    line = next(l for l in seen.splitlines() if "is generating into this store" in l)
    assert "another run (pid [2J]0;owned on evilhost" + "x" * 56 + "... (308 characters), since [31mnow[0m)" in line, line
    assert not any(ch in seen for ch in "\x1b\x07\r\u202e") and len(line) < 400
