"""Red-team round 2 (issue 19), findings 1, 2, 4, 7, 10, 11 and 12, each replayed through the `silverspoon` command:
key variables, deadlines, files whose content must not be echoed, terminal escapes, failing fast on a refused key,
redirects, and partial failure. Each attack ends in one clear error (exit != 0, nothing lost) or a safe outcome.
(The backend-level replays of 2, 10 and 11 are in tests/test_api.py.)"""
import os, re, json, hashlib
from pathlib import Path
import pytest
import yaml
from conftest import run_cli
from silverspoon.testing import FakeChatServer

SECRET = "sk-test-" + hashlib.sha256(b"silverspoon issue 19").hexdigest()[:24]


@pytest.fixture
def cli(capsys, monkeypatch):
    "The `silverspoon` command in this process: returns rc, stdout, stderr."
    from types import SimpleNamespace
    from silverspoon.cli import main
    def call(*args, env=None):
        for k, v in (env or {}).items(): monkeypatch.setenv(k, v)
        rc = main([str(a) for a in args]); out = capsys.readouterr()
        return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)
    return call


def _one_clear_error(r, *needles, rc=2):
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


def _write(path:Path, params:dict)->Path:
    path.write_text(yaml.safe_dump(params)); return path


# --- 1. a key variable must be one meant for an API key ----------------------------------------------------------------

@pytest.mark.parametrize("where", ["model", "judge"])
@pytest.mark.parametrize("var", ["HOME", "PATH", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"])
def test_api_key_env_naming_any_variable_is_refused(tmp_path, cli, where, var):
    m = {"backend": "openai", "id": "m", "base_url": "https://collector.example.com/v1", "api_key_env": var}
    p = {"study": "normative", "model": m} if where == "model" else \
        {"study": "normative", "model": {"backend": "replay", "id": "GPT4"}, "task": {"judge": m}}
    f = _write(tmp_path/"exfil.yaml", p)
    field = "model.api_key_env" if where == "model" else "task.judge.api_key_env"
    for args in (["check", f], ["run", f, "--reports-dir", tmp_path/"reports"]):
        _one_clear_error(cli(*args, env={"SILVERSPOON_STORE": str(tmp_path/"store")}), str(f), f"field `{field}` = `{var}` does not name an API key variable")
    assert not (tmp_path/"reports").exists() and not (tmp_path/"store").exists()
    # the person who runs it may allow a name explicitly, on their machine
    r = cli("check", f, env={"SILVERSPOON_KEY_VARS": f"OTHER,{var}"})
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_a_name_shaped_token_in_api_key_env_is_not_echoed(tmp_path, cli):
    token = "ghp_" + hashlib.sha256(b"gh").hexdigest()[:36]          # a GitHub token is shaped like a variable name
    f = _write(tmp_path/"k.yaml", {"study": "normative", "model": {"backend": "openai", "id": "m", "api_key_env": token}})
    r = cli("check", f)
    _one_clear_error(r, "field `model.api_key_env` = (not shown: it may be a key) does not name an API key variable")
    assert token not in r.stdout + r.stderr and token[4:] not in r.stdout + r.stderr


# --- 4. local files are named, never quoted -----------------------------------------------------------------------------

@pytest.mark.parametrize("content", [f"{SECRET}: x\n", f"aws_secret_access_key = {SECRET}\n[default]\n", f"password: {SECRET}: x\n",
                                     f"machine api.example.com\n  login me\n  password {SECRET}\n"])
def test_include_of_a_non_params_file_never_echoes_it(tmp_path, cli, content):
    (tmp_path/"credentials").write_text(content)
    f = tmp_path/"run.yaml"; f.write_text("include: credentials\nstudy: normative\nmodel: {backend: replay, id: GPT4}\n")
    r = cli("check", f)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(tmp_path/"credentials") in r.stderr, r.stderr
    assert SECRET not in r.stdout + r.stderr and "aws_secret" not in r.stderr and "password" not in r.stderr, r.stderr


def test_human_file_that_is_not_a_csv_is_not_echoed(tmp_path):
    "A STOP run whose task.human_file names a key file: FAIL names the file and the missing columns, in the CLI and on the failure page."
    secret_file = tmp_path/"id_key"
    secret_file.write_text(f"-----BEGIN PRIVATE KEY {SECRET}-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n")
    f = _write(tmp_path/"stop-human.yaml", {"include": str(Path(__file__).resolve().parent.parent/"params"/"stop"/"_base-replay.yaml"),
                                            "model": {"id": "gpt4"}, "sample": {"n": 20, "stratify_by": "severity", "seed": 0},
                                            "task": {"n_boot": 20, "human_file": str(secret_file)}})
    r = run_cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{secret_file}: not a human annotation CSV: it lacks the columns" in r.stderr, r.stderr
    failed = (tmp_path/"reports"/"stop"/"stop-human.failed.html").read_text()
    assert "not a human annotation CSV" in failed
    for text in (r.stdout + r.stderr, failed, (tmp_path/"reports"/"stop"/"stop-human.failed.ipynb").read_text()):
        assert SECRET not in text and "BEGIN PRIVATE" not in text and "MIIEvQ" not in text


# --- 7. terminal escape sequences ----------------------------------------------------------------------------------------

def test_control_characters_are_never_printed_raw(tmp_path, cli):
    esc = "\x1b]0;pwned\x07\x1b[2J\rok   \u202e"
    f = _write(tmp_path/"esc.yaml", {"study": "normative", "description": esc, "model": {"backend": "hf", "id": f"org/model{esc}"}})
    r = cli("check", f)
    assert r.returncode == 0 and r.stdout.count("\n") == 1, r.stdout
    assert r"org/model\x1b]0;pwned\x07\x1b[2J\x0dok   \u202e" in r.stdout, r.stdout
    bad = _write(tmp_path/"esc-bad.yaml", {"study": "normative", "model": {"backend": "replay", "id": "GPT4", esc: 1}, "description": esc})
    r = cli("check", bad)
    _one_clear_error(r, r"unknown field `model.\x1b]0;pwned")
    for out in (r.stdout, r.stderr): assert not re.search("[\x00-\x09\x0b-\x1f\x7f\u202e]", out), repr(out)


# --- 10. a refused key fails fast with the cause ---------------------------------------------------------------------------

def test_wrong_key_stops_the_run_with_check_the_key(tmp_path):
    with FakeChatServer(api_key="sk-the-right-key-0123456789") as srv:
        m = {"backend": "openai", "id": "fake-model", "base_url": srv.base_url, "api_key_env": "SILVERSPOON_TEST_API_KEY",
             "concurrency": 2, "batch_size": 4, "max_retries": 2, "timeout_s": 5.0}
        f = _write(tmp_path/"wrong-key.yaml", {"study": "normative", "model": m, "sample": {"n": 12, "stratify_by": "topic", "seed": 1},
                                               "task": {"n_boot": 20}})
        r = run_cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index",
                    env={"SILVERSPOON_TEST_API_KEY": SECRET, "SILVERSPOON_STORE": str(tmp_path/"store")})
        n_requests = srv.stats()["requests"]
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stderr and f"the server at {srv.base_url} refused the request with HTTP 401" in r.stderr, r.stderr
    assert "check the key in the environment variable `SILVERSPOON_TEST_API_KEY`" in r.stderr and "could be labelled" not in r.stderr, r.stderr
    assert n_requests <= 2, n_requests                       # the first batch stopped; no retries, no further batches
    assert SECRET not in r.stdout + r.stderr
    assert not (tmp_path/"reports"/"normative"/"wrong-key.html").exists()


# --- 12. partial failure is visible in the summary and the exit status -------------------------------------------------------

def test_judge_partly_failing_is_incomplete_not_ok(tmp_path):
    with FakeChatServer(fail_every=2, codes=(500,)) as srv:      # every second judge call fails
        judge = {"backend": "openai", "id": "judge", "base_url": srv.base_url, "max_retries": 0, "timeout_s": 5.0, "concurrency": 2}
        f = _write(tmp_path/"half-judged.yaml", {"study": "normative", "model": {"backend": "replay", "id": "GPT4"},
                                                 "sample": {"n": 20, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 20, "judge": judge}})
        r = run_cli("run", f, "--reports-dir", tmp_path/"reports", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 3, r.stdout + r.stderr
    counts = json.loads(json.dumps(__import__("pandas").read_csv(tmp_path/"reports"/"normative"/"half-judged"/"judge_counts.csv").iloc[0].to_dict()))
    assert 0 < counts["failed"] < counts["requests"], counts
    line = next(l for l in r.stdout.splitlines() if l.startswith("INCOMPLETE"))
    assert f"{counts['failed']} of {counts['requests']} calls failed in judge_counts" in line and "a rerun retries them" in line, r.stdout
    assert not any(l.startswith("ok ") for l in r.stdout.splitlines()), r.stdout
    assert "1 of 1 runs succeeded" in r.stdout and "1 of them incomplete" in r.stdout, r.stdout
    assert (tmp_path/"reports"/"normative"/"half-judged.html").exists()          # published: nothing is lost
