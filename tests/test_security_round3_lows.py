"""Red-team round 3 (issue 31), the remaining lows, each replayed as the careless researcher or attacker did it: a
half-written draft in params/models/, a NUL byte in a path field, run names that Windows or a case-insensitive file
system treats as another file, a megabyte of free text, run names with `--` missing from the index, a hostile
lock-holder record. Each ends in one clear error (file, field and fix named; exit 2, nothing run or written) or in
the safe output the finding asked for."""
import hashlib, shutil
from pathlib import Path
import pytest
import yaml


def _one_clear_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


def _files(folder:Path)->dict:
    "sha256 of every file under `folder` (empty when it does not exist): what a refused run must leave as it was."
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.rglob("*")) if f.is_file()} if folder.exists() else {}


@pytest.fixture
def project(root, tmp_path):
    "A copy of the project's params/ (and settings.ini) with its own reports/ and store/ folders."
    t = tmp_path/"project"
    shutil.copytree(root/"params", t/"params")
    (t/"settings.ini").write_text((root/"settings.ini").read_text())
    return dict(root=t, reports=t/"reports", store=t/"store", env={"SILVERSPOON_ROOT": str(t), "SILVERSPOON_STORE": str(t/"store")})


def _scripted_run(project, name:str="mine", **fields)->Path:
    "A small normative run file with a scripted model (never run by these tests: each is refused before anything runs)."
    f = project["root"]/f"{name}.yaml"
    f.write_text(yaml.safe_dump({"study": "normative", "model": {"backend": "scripted", "id": "text:P1"}, "sample": {"n": 6}, **fields}))
    return f


# --- a malformed draft in params/models/ ------------------------------------------------------------------------------

def test_draft_model_file_stops_a_run_before_anything_is_published(project, cli):
    "A half-written params/models/draft.yaml used to fail every run's index after its reports were published (exit 2)."
    draft = project["root"]/"params"/"models"/"draft.yaml"
    draft.write_text("name: draft\nmodel: {backend: hf, id: \n  studies: [\n")   # saved mid-edit
    f = _scripted_run(project)
    r = cli("run", f, "--reports-dir", project["reports"], env=project["env"])
    _one_clear_error(r, str(draft), "not valid YAML", "keep drafts outside params/models/", "--no-index", "nothing was run or written")
    assert _files(project["reports"]) == {} and _files(project["store"]) == {}
    _one_clear_error(cli("index", "--reports-dir", project["reports"].parent, env=project["env"]), str(draft))   # the index says the same


# --- a NUL byte in a path field ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,text,field", [
    ("run", 'include: "_base-replay\\0.yaml"\nstudy: normative\nmodel: {backend: replay, id: GPT4}\n', "include"),
    ("run", 'study: normative\nmodel: {backend: hf, id: "models/x\\0y", chat_template: chatml}\n', "model.id"),
    ("run", 'study: stop\nmodel: {backend: replay, id: GPT4}\ntask: {human_file: "ann\\0.csv"}\n', "task.human_file"),
    ("model", 'name: nul\nmodel: {backend: hf, id: "a\\0b"}\n', "model.id"),
    ("finetune", 'model: {backend: hf, id: x}\ndata: {source: jsonl, train_file: "/tmp/t\\0.jsonl"}\n', "data.train_file"),
])
def test_nul_byte_in_a_path_field_is_one_clear_error(project, cli, kind, text, field):
    "A YAML \"\\0\" in `include:` used to end in a ValueError traceback (embedded null byte) from the file system."
    f = project["root"]/("params/models/nul.yaml" if kind == "model" else f"{kind}.yaml")
    f.write_text(text)
    assert "\\0" in f.read_text()
    needles = (str(f), f"field `{field}` holds a NUL byte", "Fix: remove it")
    calls = {"run": [["check", f], ["run", f, "--reports-dir", project["reports"]]],
             "model": [["check", f], ["run", "--model", f, "--studies", "normative", "--reports-dir", project["reports"]]],
             "finetune": [["finetune", "--check", f], ["finetune", f]]}[kind]
    for args in calls: _one_clear_error(cli(*args, env=project["env"]), *needles)
    assert _files(project["reports"]) == {} and _files(project["store"]) == {} and not (project["root"]/"finetune").exists()


# --- a megabyte of free text ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["description", "task.prompt", "model file description"])
def test_megabyte_of_free_text_is_refused_before_the_run(project, cli, where):
    "A 1 MB `description:` used to make a 3.5 MB executed notebook, past the 1.5 MB notebook budget."
    big = "x" * 1_000_000   # 1 MB: what the finding wrote (the file stays under the 1 MiB params-file cap)
    if where == "model file description":
        f = project["root"]/"params"/"models"/"wordy.yaml"
        f.write_text(yaml.safe_dump({"name": "wordy", "description": big, "model": {"backend": "scripted", "id": "text:P1"}}))
        calls, field = [["check", f], ["run", "--model", f, "--studies", "narratives", "--reports-dir", project["reports"]]], "description"
    else:
        top, _, sub = where.partition(".")
        f = _scripted_run(project, study="narratives", **({top: {sub: big}} if sub else {top: big}))
        calls, field = [["check", f], ["run", f, "--reports-dir", project["reports"]]], where
    for args in calls:
        _one_clear_error(cli(*args, env=project["env"]), str(f), f"field `{field}` is {len(big):,} characters long", "at most 2,000", "Fix: shorten it")
    assert _files(project["reports"]) == {} and _files(project["store"]) == {}
    f.write_text(f.read_text().replace(big, "A story of {name} from {city}."))   # the same file with a sentence passes
    assert cli("check", f, env=project["env"]).returncode == 0


# --- run names that Windows or a case-insensitive file system reads as another file -----------------------------------

@pytest.mark.parametrize("run,needle", [
    ("CON", "is a reserved device name on Windows (CON"), ("con", "(CON"), ("nul.txt", "(NUL, with any extension"),
    ("Com7", "(COM7"), ("lpt1.v2", "(LPT1"), ("gpt4-replay.", "ends in a dot, which Windows drops ('gpt4-replay' would be"),
])
def test_run_names_windows_cannot_write_are_refused(project, cli, run, needle):
    "`CON` and `gpt4-replay.` used to pass `silverspoon check`; as run names (field `run:` or the file name) they are refused."
    by_field = _scripted_run(project, name="by-field", run=run)
    by_stem = project["root"]/f"{run}.yaml"; by_stem.write_text(by_field.read_text().replace(f"run: {run}\n", "").replace(f"run: '{run}'\n", ""))
    assert "run:" not in by_stem.read_text()
    for f in (by_field, by_stem):
        for args in (["check", f], ["run", f, "--reports-dir", project["reports"]]):
            _one_clear_error(cli(*args, env=project["env"]), str(f), f"field `run` = {run!r}", needle, "Fix:")
    m = project["root"]/"params"/"models"/"dev.yaml"   # a model file's `name:` names its card file: the same rule
    m.write_text(f"name: '{run}'\nmodel: {{backend: scripted, id: 'text:P1'}}\n")
    _one_clear_error(cli("check", m, env=project["env"]), str(m), f"field `name` = {run!r}", needle)
    assert _files(project["reports"]) == {} and _files(project["store"]) == {}


def test_run_name_differing_only_in_case_from_a_published_run_is_refused(project, root, cli):
    "`GPT4-Replay` beside a committed `gpt4-replay` is one folder on macOS, Windows and a Drive mounted in Colab."
    committed = project["reports"]/"normative"/"gpt4-replay"
    shutil.copytree(root/"reports"/"normative"/"gpt4-replay", committed)
    shutil.copy(root/"reports"/"normative"/"gpt4-replay.html", committed.parent/"gpt4-replay.html")
    before = _files(project["reports"])
    f = project["root"]/"GPT4-Replay.yaml"
    f.write_text("include: params/normative/_base-replay.yaml\nmodel: {id: GPT3.5}\n")
    needles = (str(f), "field `run` = 'GPT4-Replay' differs only in case from the report of run 'gpt4-replay'", "case-insensitive", "Fix: give")
    for args in (["check", f], ["run", f, "--reports-dir", project["reports"]]):   # check looks in <project>/reports
        _one_clear_error(cli(*args, env=project["env"]), *needles)
    assert _files(project["reports"]) == before and _files(project["store"]) == {}
    # a store file of that name (a run that never published) counts the same
    (project["store"]/"normative").mkdir(parents=True); (project["store"]/"normative"/"mine.jsonl").write_text("")
    g = project["root"]/"MINE.yaml"; g.write_text("include: params/normative/_base-replay.yaml\nmodel: {id: GPT3.5}\n")
    _one_clear_error(cli("run", g, "--reports-dir", project["reports"], env=project["env"]), str(g), "differs only in case from the store of run 'mine'")
    # two files of one batch whose names differ only in case
    a, b = project["root"]/"x"/"twin.yaml", project["root"]/"y"/"Twin.yaml"
    for p in (a, b): p.parent.mkdir(); p.write_text("include: ../params/normative/_base-replay.yaml\nmodel: {id: GPT3.5}\n")
    _one_clear_error(cli("check", a, b, env=project["env"]), str(a), str(b), "runs `twin` and `Twin`, one name on a case-insensitive file system")


# --- runs with `--` in their names are in the index -------------------------------------------------------------------

def test_every_published_run_is_linked_from_the_index(project, cli):
    "`pin--scripted` (an ordinary run with `--` in its name) used to be missing from the index; factor runs must be reachable too."
    import pandas as pd
    study = project["reports"]/"normative"
    for run, est in (("pin--scripted", 0.25), ("plain", 0.5), ("smollm2-135m--reference", 0.75), ("smollm2-135m--quantization-4bit", 0.8)):
        (study/run).mkdir(parents=True)
        pd.DataFrame({"run": [run], "model": [run], "metric": ["share P1"], "estimate": [est], "ci_low": [est - 0.1],
                      "ci_high": [est + 0.1], "n": [30]}).to_csv(study/run/"summary.csv", index=False)
        (study/f"{run}.html").write_text("<p>report</p>")
    (project["reports"]/"stop"/"m--prompt_variant-plain").mkdir(parents=True)   # a study with factor runs only
    (project["reports"]/"stop"/"m--prompt_variant-plain.html").write_text("<p>report</p>")
    r = cli("index", "--reports-dir", project["reports"], env=project["env"])
    assert r.returncode == 0, r.stderr
    page = (project["reports"]/"index.html").read_text()
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
