"""Red-team findings of issue 8, each replayed: params are data (never code), secrets never reach a report, one run per
report folder, names that become paths, atomic report folders, escaped HTML, bounds. Each attack must end in one clear
error (exit != 0, nothing written) or a safe outcome."""
import os, re, json, base64, hashlib
from pathlib import Path
import pytest
import yaml
from conftest import run_cli
from silverspoon.core import ParamsError, load_params
from silverspoon.site.runner import read_params_file
from silverspoon.testing import FakeChatServer

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
    import dataclasses, papermill, silverspoon.site.runner as runner
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
    "A small replay report whose description carries markup, a key and a code-injection attempt."
    d = tmp_path_factory.mktemp("sec")
    pwned = d/"pwned"
    desc = f"<script>alert(1)</script> [x](javascript:alert(2)) <img src=x onerror=alert(3)> key {SECRET} {_payload(pwned)}"
    params = {"study": "normative", "description": desc,
              "model": {"backend": "replay", "id": "GPT4", "api_key_env": "SILVERSPOON_TEST_API_KEY"},
              "sample": {"n": 30, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 50}}
    f = d/"sec-run.yaml"; f.write_text(yaml.safe_dump(params))
    env = {"SILVERSPOON_TEST_API_KEY": SECRET, "SILVERSPOON_STORE": str(d/"store")}
    r = run_cli("run", f, "--reports-dir", d/"reports", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
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


def test_failed_rerun_keeps_last_good_report(good_run):
    reports, study = good_run["reports"], good_run["reports"]/"normative"
    before = _snapshot(study/"sec-run"); html_before = (study/"sec-run.html").read_bytes()
    index_before = (reports/"index.html").read_text()
    with FakeChatServer(fail_every=1, codes=(500,)) as srv:     # every judge call fails
        judge = {"backend": "openai", "id": "judge", "base_url": srv.base_url, "api_key_env": "SILVERSPOON_TEST_API_KEY",
                 "max_retries": 0, "timeout_s": 5.0, "concurrency": 2}
        f = good_run["file"]; first = f.read_text()   # the same file, edited (another file may not rerun its report: issue 31)
        f.write_text(yaml.safe_dump({**good_run["params"], "task": {"n_boot": 50, "judge": judge}}))
        try: r = run_cli("run", f, "--reports-dir", reports, env=good_run["env"])
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
