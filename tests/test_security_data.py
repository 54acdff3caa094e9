"""Red-team findings of issue 19 (round 2), items 3, 5, 6, 8, 9 and 13, each replayed: a deleted data file is an error
(never "missing"), every numeric field of every study has a range, a huge integer is a clear error, a symlinked store
is never written through, the "waiting for another run" notice reaches the terminal, and provenance names what made a
run (every instrument id, and a content hash a committed report is checked against). Each attack must end in one clear
error (exit != 0, nothing lost) or a safe outcome."""
import os, io, sys, json, shutil, typing, fcntl, subprocess, textwrap, dataclasses
from pathlib import Path
import pytest
from conftest import ROOT
from silverspoon.core import BOUNDS, DataError, ParamsError, RunParams, load_params, field_bounds, from_dict
from silverspoon.site.runner import verify_provenance; from silverspoon.run.executor import validate_task
from silverspoon.engine.provenance import PROVENANCE_FORMAT
from silverspoon.engine.store import GenerationStore, StoreError, generate_all, relay_notices, NOTICES_ENV
from silverspoon.instruments.text import InstrumentStore
from silverspoon.engine.backends.scripted import ScriptedBackend
from silverspoon.engine.backends import GenRequest, user
from silverspoon.core import GenerationParams

SHARED = Path(os.environ.get("SILVERSPOON_DATA") or ROOT.parent/"shared"/"data")
needs_data = pytest.mark.skipif(not (SHARED/"bbq"/"data"/"Religion.jsonl").is_file(), reason="needs the shared data folder (SILVERSPOON_DATA)")




def _one_clear_error(r, *needles, rc=2):
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


# --- 3. a deleted data file is an error, never "not in the data folder" -----------------------------------------------

def _data_copy(tmp_path, drop:str)->Path:
    "A data folder of links to the shared BBQ, CrowS-Pairs and StereoSet files, without `drop` (a path under the data folder)."
    d = tmp_path/"data"
    for ds in ("bbq", "crows-pairs", "stereoset"):
        for f in (SHARED/ds).rglob("*"):
            rel = f.relative_to(SHARED)
            if f.is_file() and rel.as_posix() != drop:
                (d/rel).parent.mkdir(parents=True, exist_ok=True); (d/rel).symlink_to(f)
    return d


@needs_data
def test_deleted_bbq_file_is_an_error_naming_it(tmp_path, monkeypatch):
    from silverspoon.studies.stop.stop_downstream import bbq_frame, stereoset_frame, MISSING_UPSTREAM
    monkeypatch.setenv("SILVERSPOON_DATA", str(_data_copy(tmp_path, "bbq/data/Religion.jsonl")))
    with pytest.raises(DataError) as e: bbq_frame()
    assert "bbq/data/Religion.jsonl: not found" in str(e.value) and "could not be retrieved" not in str(e.value), e.value
    # only the files known to be unavailable upstream are "missing" (and said so in the report)
    df, missing = bbq_frame(["Age", "SES"])
    assert sorted(missing) == ["SES"] and set(df.category) == {"Age"} and "could not be retrieved" in missing["SES"]
    assert stereoset_frame()[0] is None and "stereoset/dev" in MISSING_UPSTREAM


@needs_data
def test_deleted_bbq_file_fails_the_downstream_run(tmp_path, cli, monkeypatch):
    # the finding as reported: the downstream run went on with 5 of 6 categories and exit 0
    data, store = _data_copy(tmp_path, "bbq/data/Religion.jsonl"), tmp_path/"store"
    shutil.copytree(ROOT/"store"/"downstream", store/"downstream")
    before = {f.name: f.read_bytes() for f in (store/"downstream").iterdir()}
    monkeypatch.chdir(ROOT)   # in this process (the check stops it before any kernel starts), from the project root as a user runs it
    r = cli("run", "params/downstream/smollm2-135m-stop-lora.yaml", "--reports-dir", tmp_path/"reports", "--no-index",
            env={"SILVERSPOON_DATA": str(data), "SILVERSPOON_STORE": str(store)})
    # `silverspoon run` fetches every data file of its runs before any notebook starts: one error, nothing run
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("error: 1 of 13 data files cannot be used") and "bbq/data/Religion.jsonl: not found" in r.stderr, r.stderr
    out = tmp_path/"reports"/"downstream"
    assert not (out/"smollm2-135m-stop-lora.html").exists() and not (out/"smollm2-135m-stop-lora.failed.html").exists()
    assert {f.name: f.read_bytes() for f in (store/"downstream").iterdir()} == before      # nothing stored or lost


# --- 5. every numeric field of every study has a range ----------------------------------------------------------------

def _numeric_fields(cls, prefix="", seen=None):
    "(field, dotted name) of every int/float field (or list of them) of dataclass `cls` and the dataclasses inside it."
    seen = set() if seen is None else seen
    if cls in seen: return []
    seen.add(cls); out = []
    for f in dataclasses.fields(cls):
        t = typing.get_type_hints(cls)[f.name]
        args = typing.get_args(t) or (t,)
        numbers = lambda a: a in (int, float) or (typing.get_origin(a) in (list, tuple) and any(x in (int, float) for x in typing.get_args(a)))
        if any(numbers(a) for a in args) or numbers(t): out.append((f, prefix + f.name))
        for a in args:
            if dataclasses.is_dataclass(a): out += _numeric_fields(a, f"{prefix}{f.name}.", seen)
    return out


def test_every_numeric_field_of_every_study_has_bounds():
    # a shared field's range comes from its name (core.BOUNDS); a study's own field declares it in its metadata
    from silverspoon.studies import STUDY_REGISTRY, get_study
    from silverspoon.studies.stop.stop_finetune import FinetuneParams
    schemas = {"run": RunParams, "finetune": FinetuneParams, **{f"{s}.task": get_study(s).task for s in STUDY_REGISTRY}}
    unbounded = [f"{k}: {path}" for k, cls in schemas.items() for f, path in _numeric_fields(cls) if field_bounds(f) is None]
    assert not unbounded, (f"numeric fields without a range: {unbounded}. Fix: give a study's task field its range in its metadata, "
                           'e.g. `top_k: int = field(default=10, metadata={"bounds": (1, 10_000)})`')
    assert {"narratives.task", "letters.task", "downstream.task"} <= set(schemas)
    assert "stop_scale.task: seeds" in [f"{k}: {p}" for k, cls in schemas.items() for _, p in _numeric_fields(cls)]   # a list of numbers is a numeric field


def test_a_study_field_range_is_never_lent_to_another_study_by_name():
    # stop_scale's `seeds` are indices 0-449; a new study's `seeds` gets no range from them, so the test above names it
    from silverspoon.studies.stop.stop_scale import ScaleTask
    @dataclasses.dataclass
    class NewTask:
        seeds: list[int] = dataclasses.field(default_factory=list)
        top_k: int = 5
    scale = {f.name: f for f in dataclasses.fields(ScaleTask)}
    assert field_bounds(scale["seeds"]) == (0, 449) and "seeds" not in BOUNDS and "top_k" not in BOUNDS
    assert [p for f, p in _numeric_fields(NewTask) if field_bounds(f) is None] == ["seeds", "top_k"]
    with pytest.raises(ParamsError, match=r"s.yaml: field `task.seeds\[1\]` = 450 must be in \[0, 449\]"):
        from_dict(ScaleTask, {"seeds": [310, 450]}, "s.yaml", "task.")


STUDY_BASE = {
    "letters": "study: letters\nmodel: {backend: replay, id: chatgpt}\n",
    "narratives": "study: narratives\nmodel: {backend: hf, id: some/model}\n",
    "downstream": "study: downstream\nmodel: {backend: hf, id: some/model}\n",
}
DOWNSTREAM_TASK = "adapter: adapters/stop-finetune-smollm2-cpu/adapter, "


@pytest.mark.parametrize("study,field,value,needle", [
    ("letters", "agency_lr", "-1.0", "must be in (0, 1]"), ("letters", "agency_lr", "1000000.0", "must be in (0, 1]"),
    ("letters", "agency_epochs", "1000000000", "must be in [1, 1000]"), ("letters", "agency_batch_size", "100000000", "must be in [1, 4096]"),
    ("letters", "weat_n_perm", "100000000000", "must be in [1, 1000000]"),
    ("narratives", "n_topics", "1000000000", "must be in [2, 1000]"), ("narratives", "min_df", "100000000000", "must be in [1, 10000000]"),
    ("narratives", "cloud_words", "1000000000", "must be in [1, 10000]"), ("narratives", "topic_seed", "-1", "must be in [0, 4294967295]"),
    ("narratives", "vader_positive", "5.0", "must be in [-1, 1]"),
    ("downstream", "likelihood_batch_size", "1000000000", "must be in [1, 4096]"), ("downstream", "bbq_n", "100000000000000", "must be in [1, 100000000]"),
])
def test_unbounded_task_fields_now_fail_check(tmp_path, cli, study, field, value, needle):
    f = tmp_path/f"{study}.yaml"
    f.write_text(STUDY_BASE[study] + f"task: {{{DOWNSTREAM_TASK if study == 'downstream' else ''}{field}: {value}}}\n")
    r = cli("check", f)
    _one_clear_error(r, str(f), f"field `task.{field}` = ", needle)


def test_in_range_task_fields_pass_check(tmp_path, cli):
    f = tmp_path/"narratives.yaml"
    f.write_text(STUDY_BASE["narratives"] + "task: {topic_seed: 4294967295, vader_positive: 1.0, vader_negative: -1.0, n_topics: 2}\n")
    r = cli("check", f)
    assert r.returncode == 0, r.stderr


# --- 6. a 5000-digit integer is a clear error, not a traceback --------------------------------------------------------

@pytest.mark.parametrize("where", ["task:\n  n_boot: {n}\n", "generation: {{seed: {n}}}\n", "description: {n}\n"])
def test_huge_integer_is_one_clear_error(tmp_path, cli, where):
    f = tmp_path/"huge.yaml"
    f.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\n" + where.format(n="7" * 5000))
    r = cli("check", f)
    _one_clear_error(r, str(f), "is an integer of 5000 digits")
    assert r.stderr.strip().count("\n") == 0 and len(r.stderr) < 500, r.stderr


def test_huge_integer_from_papermill_parameters_is_one_clear_error():
    # the notebook path: papermill parameters arrive as a mapping, never through YAML
    p = load_params({"study": "normative", "run": "r", "model": {"backend": "replay", "id": "GPT4"}, "task": {"n_boot": 10**5000}})
    with pytest.raises(ParamsError, match=r"field `task.n_boot` = an integer of thousands of digits must be in \[1, 100000\]"):
        validate_task(p, "<parameters>")
    with pytest.raises(ParamsError, match="field `description` must be str, got int an integer of thousands of digits"):
        load_params({"study": "normative", "run": "r", "model": {"backend": "replay", "id": "GPT4"}, "description": 10**5000})


# --- 8. a store file that is a symbolic link is never written through -------------------------------------------------

REQS = [GenRequest(f"item-{i}", user(f"question {i}")) for i in range(3)]


@pytest.mark.parametrize("linked", ["store", "lock"])
def test_symlinked_store_is_refused_before_generating(tmp_path, linked):
    target = tmp_path/"elsewhere"/"precious.txt"; target.parent.mkdir(); target.write_text("keep me\n")
    store = tmp_path/"store"/"normative"/"run.jsonl"; store.parent.mkdir(parents=True)
    (store if linked == "store" else store.with_name("run.jsonl.lock")).symlink_to(target)
    be = ScriptedBackend()
    with pytest.raises(StoreError, match="is a symbolic link") as e:
        generate_all(be, REQS, GenerationParams(), GenerationStore(store), run="run", progress=False)
    assert "nothing was generated or written" in str(e.value) and "Fix:" in str(e.value)
    assert be.calls == [] and target.read_text() == "keep me\n"         # nothing generated, the target untouched


def test_store_replaced_by_a_link_mid_run_is_not_written_through(tmp_path):
    # the store became a link after the run took its lock (a check-then-write race): the append itself refuses the link
    target = tmp_path/"precious.txt"; target.write_text("keep me\n")
    store = tmp_path/"run.jsonl"
    st = GenerationStore(store)
    be = ScriptedBackend(batch_size=1)
    generate_all(be, REQS[:1], GenerationParams(), st, run="run", progress=False)
    store.unlink(); store.symlink_to(target)
    with pytest.raises(StoreError, match="symbolic link"):
        st.append([dict(st.records()[0])])
    assert target.read_text() == "keep me\n"


# --- 9. the "another run holds this store" notice reaches the terminal ------------------------------------------------

WAITER = textwrap.dedent('''
    import sys
    from silverspoon.core import GenerationParams
    from silverspoon.engine.backends import GenRequest, user
    from silverspoon.engine.store import GenerationStore, generate_all
    from silverspoon.engine.backends.scripted import ScriptedBackend
    reqs = [GenRequest(f"item-{i}", user(f"question {i}")) for i in range(3)]
    generate_all(ScriptedBackend(), reqs, GenerationParams(), GenerationStore(sys.argv[1]), run="b", progress=False)
''')


def test_waiting_notice_reaches_the_terminal_not_the_report(tmp_path):
    store = tmp_path/"run.jsonl"
    script = tmp_path/"waiter.py"; script.write_text(WAITER)
    fd = os.open(tmp_path/"run.jsonl.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)                                        # this test is "another run" holding the store
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": "holder-host", "since": "now"}).encode(), 0)
    terminal = io.StringIO()
    try:
        with relay_notices(to=terminal, interval=0.05):                  # what `silverspoon run` does around papermill
            p = subprocess.Popen([sys.executable, str(script), str(store)], stderr=subprocess.PIPE, text=True)   # the kernel
            deadline = __import__("time").time() + 60
            while "waiting until it is done" not in terminal.getvalue():
                assert p.poll() is None and __import__("time").time() < deadline, (p.poll(), terminal.getvalue())
                __import__("time").sleep(0.05)
            os.close(fd); fd = None                                       # the other run is done
            _, kernel_stderr = p.communicate(timeout=60)
    finally:
        if fd is not None: os.close(fd)
    assert p.returncode == 0, kernel_stderr
    shown = terminal.getvalue()
    assert f"pid {os.getpid()} on holder-host" in shown and "the other run is done" in shown, shown
    assert "waiting" not in kernel_stderr and "holder-host" not in kernel_stderr, kernel_stderr   # the notebook's output (the report) has neither
    assert len(GenerationStore(store)) == 3 and NOTICES_ENV not in os.environ


def test_concurrent_runs_share_one_relay():
    # `silverspoon run --jobs 2` runs two papermill runs in threads of one process: both kernels' notices reach the terminal
    say = lambda m: subprocess.run([sys.executable, "-c", f"from silverspoon.engine.store import notice; notice({m!r})"], check=True)
    terminal = io.StringIO()
    with relay_notices(to=terminal, interval=0.05) as first:
        with relay_notices() as second:
            assert first == second and os.environ[NOTICES_ENV] == first
            say("from run two")
        assert os.environ[NOTICES_ENV] == first                          # the first run's kernel still reaches the terminal
        say("from run one")
    assert terminal.getvalue() == "from run two\nfrom run one\n" and NOTICES_ENV not in os.environ and not Path(first).exists()


def test_runner_relays_kernel_notices(tmp_path, monkeypatch, capsys):
    # `silverspoon run` wraps papermill in the relay: a notice the kernel (a child process) sends reaches the runner's stderr
    import papermill, silverspoon.run.executor as runner
    def fake_execute(*a, **k):
        subprocess.run([sys.executable, "-c", "from silverspoon.engine.store import notice; notice('another run holds the store')"], check=True)
        raise RuntimeError("stop here")
    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    with pytest.raises(Exception, match="stop here"):
        runner.run_params_file(ROOT/"params"/"normative"/"gpt4-replay.yaml", tmp_path/"reports")
    assert "another run holds the store" in capsys.readouterr().err


# --- 13. provenance: every instrument id, and a content hash a committed report is checked against -------------------

def test_instrument_counts_keep_every_id_of_a_name():
    # the downstream adapter arm scores with its own likelihood instrument id: both ids are counted, each with its tally
    st = InstrumentStore(None)
    st.count("likelihood", "base", 0, 1044); st.count("likelihood", "base+adapter", 0, 1044)
    s = st.summary()["instruments"]["likelihood"]
    assert s["instruments"] == {"base": {"hits": 0, "misses": 1044}, "base+adapter": {"hits": 0, "misses": 1044}}
    assert (s["hits"], s["misses"]) == (0, 2088)


def _tree_copy(tmp_path, study_nb)->Path:
    t = tmp_path/"tree"
    shutil.copytree(ROOT/"silverspoon", t/"silverspoon", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT/"params", t/"params")
    shutil.copytree(ROOT/"tests"/"parser_sets", t/"tests"/"parser_sets")   # read by the run (its validity rows): in its record's inputs
    (t/"nbs").mkdir(); shutil.copy(ROOT/"nbs"/study_nb, t/"nbs"/study_nb)
    return t


@needs_data
def test_fresh_run_verifies_against_its_tree(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    r = cli("run", "params/normative/gpt4-replay.yaml", "--reports-dir", tmp_path/"reports", "--no-index")
    assert r.returncode == 0, r.stderr
    run_dir = tmp_path/"reports"/"normative"/"gpt4-replay"
    prov = json.loads((run_dir/"provenance.json").read_text())["content"]
    assert prov["format"] == PROVENANCE_FORMAT and prov["params_file"] == "params/normative/gpt4-replay.yaml"
    assert {"params/normative/gpt4-replay.yaml", "params/normative/_base-replay.yaml", "nbs/10_normative.ipynb", "silverspoon/core.py"} <= set(prov["files"])
    assert prov["data"] and all(v for v in prov["data"].values())
    assert verify_provenance(run_dir) == []
    # the same report against a tree where one included file changed: the check names it
    t = _tree_copy(tmp_path, "10_normative.ipynb")
    assert verify_provenance(run_dir, root=t) == []
    (t/"params"/"normative"/"_base-replay.yaml").write_text((t/"params"/"normative"/"_base-replay.yaml").read_text() + "# changed\n")
    (t/"silverspoon"/"stats"/"__init__.py").write_text((t/"silverspoon"/"stats"/"__init__.py").read_text() + "\n")
    assert [m.split(":")[0] for m in verify_provenance(run_dir, root=t)] == ["params/normative/_base-replay.yaml", "silverspoon/stats/__init__.py"]
    # a parser set the run read, a label swapped (issue 50.5: validity 0.975 -> 0.455 with a clean verify): named too
    ps = t/"tests"/"parser_sets"/"normative.csv"; rows = ps.read_text().splitlines(keepends=True)
    swapped = rows[1].replace(",P1,", ",@@,").replace(",other,", ",P1,").replace(",@@,", ",other,")
    assert swapped != rows[1]; ps.write_text("".join([rows[0], swapped, *rows[2:]]))
    assert "tests/parser_sets/normative.csv" in [m.split(":")[0] for m in verify_provenance(run_dir, root=t)]


def test_committed_reports_match_the_tree_that_holds_them():
    runs = sorted(p.parent for p in (ROOT/"reports").glob("*/*/provenance.json"))
    assert runs
    fmt = lambda r: json.loads((r/"provenance.json").read_text()).get("content", {}).get("format")
    old = [str(r.relative_to(ROOT)) for r in runs if fmt(r) != PROVENANCE_FORMAT]
    bad = {str(r.relative_to(ROOT)): verify_provenance(r) for r in runs if fmt(r) == PROVENANCE_FORMAT}   # every current one is checked
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}
    # format 3 pins every published file and the store content read: a report of an older format cannot show an edited
    # answer or summary.csv, so it fails here (regenerate with `make reports`) instead of being skipped
    assert not old, (f"{len(old)} of {len(runs)} committed reports were made by an older silverspoon (no content record of format "
                     f"{PROVENANCE_FORMAT}, e.g. {old[0]}): regenerate them with `make reports`")
    for r in runs:   # each pins its published files, and a run with a store pins the store it read
        c, prov = json.loads((r/"provenance.json").read_text())["content"], json.loads((r/"provenance.json").read_text())
        assert f"{r.name}/summary.csv" in (c["outputs"] or {}) and f"{r.name}.html" in c["outputs"], r
        if (prov.get("store") or {}).get("path"): assert prov["store"]["path"] in c["stores"], r


def test_committed_reports_name_a_clean_commit_of_this_history():
    "A committed report was made from a committed tree: `dirty` is false, and its `git_sha` is a commit of this repository (checked where the history is there: not in a shallow clone). Commit the code, then regenerate: a run on uncommitted code names a commit that does not hold it."
    runs = sorted(p.parent for p in (ROOT/"reports").glob("*/*/provenance.json"))
    prov = {str(r.relative_to(ROOT)): json.loads((r/"provenance.json").read_text()) for r in runs}
    dirty = [k for k, v in prov.items() if v.get("dirty") is not False]
    assert not dirty, f"{len(dirty)} committed report(s) made from a tree with uncommitted changes in silverspoon/, nbs/ or params/ (e.g. {dirty[0]}): commit the code, then regenerate them"
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
    if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false": return   # no git, or a shallow clone: the dirty flags above are the check
    missing = [s for s in sorted({v["git_sha"] for v in prov.values()}) if git("cat-file", "-e", f"{s}^{{commit}}").returncode]
    assert not missing, f"committed reports name commit(s) this history lacks: {missing}"
