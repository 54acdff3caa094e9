"""Attacks on the generation store and a run's provenance (red-team issue 8 findings 6, 7, 10; round 3, issue 31, finding 4 and
the store lows): malformed records, concurrent runs, an unwritable store, edited stored answers or published files, a FIFO or an
overlong line, a cache record of another instrument, an outside store never published as an absolute path. Each attack ends in
one clear error naming the file, or a safe outcome."""
import fcntl, json, os, signal, subprocess, sys, textwrap, time, warnings, hashlib
from collections import Counter
from pathlib import Path
import pytest
import yaml
from conftest import ROOT
from silverspoon.core import GenerationParams, load_params, stable_hash
from silverspoon.engine.backends import GenRequest, Generation, user
from silverspoon.engine.store import GenerationStore, StoreError, generate_all, request_key, store_for, MAX_LINE_BYTES
from silverspoon.engine.backends.scripted import ScriptedBackend
from silverspoon.site.runner import verify_provenance


# ----------------------------------------------------------------------------------------------------
# Malformed records, concurrent runs, an unwritable store, committed stores clean (was tests/test_security_store.py)
def counting():
    "Answers `ok <item_id>` to every request; counts generate calls per item (`counts`)."
    return ScriptedBackend(batch_size=3, identity={"backend": "counting"})


REQS = [GenRequest(f"q{i}", user(f"question {i}")) for i in range(6)]


def _lines(path):
    "The records of every line that parses (a line torn by a kill, or still being written, is left out)."
    out = []
    for line in Path(path).read_bytes().splitlines():
        try: out.append(json.loads(line))
        except ValueError: pass
    return out


def _append_lines(path, *objs):
    with open(path, "ab") as f:
        for o in objs: f.write((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n")


# ---------------------------------------------------------------- finding 7: malformed records are reported, never used
def test_malformed_records_never_replace_a_good_record(tmp_path):
    path = tmp_path/"s.jsonl"
    df = generate_all(counting(), REQS, GenerationParams(), GenerationStore(path), run="r", progress=False)
    good = {r["item_id"]: r for r in _lines(path)}
    k = good["q0"]["key"]
    attacks = [  # (line appended after the 6 good ones, why it must be refused)
        ({"key": k}, "missing field(s) `run`"),                                             # a bare key
        ({"key": k, "answer": None, "error": None}, "missing field(s)"),                    # as in the issue
        ({**good["q0"], "answer": None, "error": None}, "both are null"),                   # the same, complete
        ({"answer": 12345}, "missing field(s) `key`"),                                      # no key
        ({**good["q0"], "key": [k, "x"]}, "`key` must be a non-empty string, not list"),    # unhashable (crashed every rerun)
        ({**good["q1"], "completion_tokens": 10**30}, "`completion_tokens` must be an integer from 0 to 2**31-1 or null, not int"),  # a server's absurd count: OverflowError on every rerun
        ({**good["q1"], "prompt_tokens": "lots"}, "`prompt_tokens` must be an integer from 0 to 2**31-1 or null, not str"),  # ArrowInvalid later
        ({**good["q2"], "answer": 12345}, "`answer` must be a string or null, not int"),
        ({**good["q3"], "error": "boom"}, "both are set"),
        ({**good["q4"], "messages": user("another question")}, "not the hash"),            # a key that is not its request's
        (b"\x00\x00garbage", "not JSON"), (b"[1, 2, 3]", "not a JSON object but list")]
    _append_lines(path, *(a for a, _ in attacks))
    with pytest.warns(UserWarning) as w: st = GenerationStore(path)
    msg = " ".join(str(x.message) for x in w)
    assert f"skipped {len(attacks)} unusable line(s) (line 7: missing field(s)" in msg
    # every attack is counted with its own line number (the good records are lines 1-6) and its reason
    assert sorted(st.bad_lines) == list(range(7, 7 + len(attacks)))
    for no, (_, why) in enumerate(attacks, start=7): assert why in st.bad_lines[no], (no, st.bad_lines[no])
    assert st.summary()["unusable_lines"] == len(attacks) and st.summary()["unusable"][0].startswith("line 7: missing field(s)")
    # the good records stand, and a rerun uses them: nothing generated, the same table
    be = counting()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore"); df2 = generate_all(be, REQS, GenerationParams(), GenerationStore(path), run="r", progress=False)
    assert be.calls == [] and df2.cached.all()
    assert df2.answer.tolist() == df.answer.tolist() and str(df2.prompt_tokens.dtype) == "Int64"


def test_malformed_record_without_a_good_one_is_generated_again(tmp_path):
    path = tmp_path/"s.jsonl"
    generate_all(counting(), REQS[:3], GenerationParams(), GenerationStore(path), run="r", progress=False)
    k5 = request_key({"backend": "counting"}, "q5", REQS[5].messages, GenerationParams())
    _append_lines(path, {"key": k5, "answer": "planted", "error": None})    # a record planted for an item never generated
    be = counting()
    with pytest.warns(UserWarning, match="line 4: missing field"):
        df = generate_all(be, REQS, GenerationParams(), GenerationStore(path), run="r", progress=False)
    assert dict(be.counts) == {"q3": 1, "q4": 1, "q5": 1} and df.answer.tolist() == [f"ok q{i}" for i in range(6)]


def test_a_backend_cannot_poison_the_store(tmp_path):
    "Odd values from a backend are normalised when written: None, or a recorded failure that the next run retries."
    junk = ScriptedBackend(lambda r: Generation(12345, 7, prompt_tokens="lots", completion_tokens=-1, seconds=float("inf")) if r.item_id == "q0"
                           else Generation("fine", "stop", prompt_tokens="lots", completion_tokens=2.5), identity={"backend": "counting"})
    path = tmp_path/"s.jsonl"
    df = generate_all(junk, REQS[:2], GenerationParams(), GenerationStore(path), run="r", progress=False)
    assert df.answer.isna().tolist() == [True, False] and df.error[0].startswith("BadAnswer: the backend returned int")
    assert df.prompt_tokens.isna().all() and df.completion_tokens.isna().all() and df.seconds.isna().all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning); st = GenerationStore(path)     # no unusable line: everything written is readable
    be = counting()
    generate_all(be, REQS[:2], GenerationParams(), st, run="r", progress=False)
    assert dict(be.counts) == {"q0": 1}                                  # the failure is retried, the odd-but-fine answer kept


def test_committed_stores_are_clean_and_their_keys_unchanged():
    "Every committed store file passes the record check, and every key is still what request_key computes."
    files = sorted(f for f in (ROOT/"store").glob("*/*.jsonl") if not f.name.endswith(".instruments.jsonl"))
    assert files
    for f in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning); st = GenerationStore(f)
        assert st.n_bad_lines == 0 and len(st) == st.n_lines == len(_lines(f)), f
        for r in st.records():
            assert r["key"] == request_key(r["identity"], r["item_id"], r["messages"], GenerationParams(**r["gen"]), r["sample_index"]), f


def test_committed_instrument_caches_are_clean():
    "Every committed instrument cache passes its own record check (no torn or foreign lines)."
    from silverspoon.instruments.text import InstrumentStore
    files = sorted((ROOT/"store").glob("*/*.instruments.jsonl"))
    assert files
    for f in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning); st = InstrumentStore(f)
        assert st.n_bad_lines == 0 and len(st) == st.n_lines == len(_lines(f)), f


# ---------------------------------------------------------------- finding 6: two runs on one store generate each item once
N_ITEMS, BATCH = 24, 4
SCRIPT = textwrap.dedent(f'''
    import hashlib, json, sys
    from silverspoon.core import GenerationParams
    from silverspoon.engine.backends import GenRequest, user
    from silverspoon.engine.store import GenerationStore, generate_all
    from silverspoon.engine.backends.scripted import ScriptedBackend

    store_path, side_path, out_path, gate, tag = sys.argv[1:6]
    # 0.05 s per item; every batch waits until the test opens the gate; each finished batch's item ids go to side_path
    slow = ScriptedBackend(lambda r: "answer " + hashlib.sha256(r.messages[-1]["content"].encode()).hexdigest()[:12], delay=0.05,
                           batch_size={BATCH}, identity={{"backend": "slow-fake", "id": "v1"}}, log_path=side_path, wait_for=gate)
    reqs = [GenRequest(f"item-{{i:02d}}", user(f"question {{i}}")) for i in range({N_ITEMS})]
    df = generate_all(slow, reqs, GenerationParams(), GenerationStore(store_path), run=tag, progress=False)
    json.dump({{"answers": df.answer.tolist(), "cached": int(df.cached.sum())}}, open(out_path, "w"))
''')


def _start(script, d, tag, gate):
    err = open(d/f"err-{tag}.txt", "w")
    return subprocess.Popen([sys.executable, str(script), str(d/"store.jsonl"), str(d/f"side-{tag}.txt"), str(d/f"out-{tag}.json"), str(gate), tag],
                            stdout=subprocess.DEVNULL, stderr=err)


def _wait_for(cond, what, procs=(), timeout=60):
    deadline = time.time() + timeout
    while not cond():
        for p in procs:
            if p.poll() is not None: pytest.fail(f"a run ended while waiting for: {what}")
        if time.time() > deadline: pytest.fail(f"timed out waiting for: {what}")
        time.sleep(0.01)


def _lock_busy(lock_path):
    if not lock_path.exists(): return False
    fd = os.open(lock_path, os.O_RDWR)
    try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); return False
    except BlockingIOError: return True
    finally: os.close(fd)


def _generated(d, *tags):
    c = Counter()
    for t in tags:
        if (d/f"side-{t}.txt").exists(): c.update((d/f"side-{t}.txt").read_text().split())
    return c


def test_two_concurrent_runs_generate_each_item_once(tmp_path):
    script, gate = tmp_path/"run.py", tmp_path/"gate"
    script.write_text(SCRIPT)
    a, b = _start(script, tmp_path, "a", gate), _start(script, tmp_path, "b", gate)
    err = lambda t: (tmp_path/f"err-{t}.txt").read_text()
    # both are running and one of them holds the lock while the other waits for it, then both may go on
    _wait_for(lambda: "waiting until it is done" in err("a") + err("b"), "one run to wait for the other", (a, b))
    gate.touch()
    assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0, err("a") + err("b")
    items = [f"item-{i:02d}" for i in range(N_ITEMS)]
    assert _generated(tmp_path, "a", "b") == Counter(items)              # every item generated exactly once
    assert sorted(r["item_id"] for r in _lines(tmp_path/"store.jsonl")) == items
    outs = [json.loads((tmp_path/f"out-{t}.json").read_text()) for t in "ab"]
    assert outs[0]["answers"] == outs[1]["answers"] and sorted(o["cached"] for o in outs) == [0, N_ITEMS]
    waiter = "a" if "waiting" in err("a") else "b"
    assert f"pid {(a if waiter == 'b' else b).pid}" in err(waiter) and "the other run is done" in err(waiter)


def test_a_killed_lock_holder_leaves_no_stale_lock(tmp_path):
    script, gate = tmp_path/"run.py", tmp_path/"gate"
    script.write_text(SCRIPT)
    store, lock = tmp_path/"store.jsonl", tmp_path/"store.jsonl.lock"
    a = _start(script, tmp_path, "a", gate)
    _wait_for(lambda: _lock_busy(lock), "run a to hold the lock", (a,))
    b = _start(script, tmp_path, "b", gate)
    _wait_for(lambda: "waiting until it is done" in (tmp_path/"err-b.txt").read_text(), "run b to wait", (a, b))
    gate.touch()
    _wait_for(lambda: store.exists() and len(_lines(store)) >= 2*BATCH, "run a to store two batches", (a,))
    os.kill(a.pid, signal.SIGKILL); a.wait(timeout=30)
    assert b.wait(timeout=60) == 0, (tmp_path/"err-b.txt").read_text()
    items = [f"item-{i:02d}" for i in range(N_ITEMS)]
    recs = _lines(store)
    assert sorted(r["item_id"] for r in recs) == items                  # complete, each item once
    stored_by_a = {r["item_id"] for r in recs if r["run"] == "a"}      # the record's `run` says which process wrote it
    gen_a, gen_b = _generated(tmp_path, "a"), _generated(tmp_path, "b")
    assert 2*BATCH <= len(stored_by_a) < N_ITEMS
    assert gen_b == Counter(set(items) - stored_by_a)                    # b generated only what a had not stored, once each
    assert stored_by_a <= set(gen_a) and len(set(gen_a) - stored_by_a) <= BATCH   # at most a's batch in flight was done twice
    assert json.loads((tmp_path/"out-b.json").read_text())["cached"] == len(stored_by_a)
    assert not _lock_busy(lock)


# ---------------------------------------------------------------- finding 10: an unwritable store says the truth
def test_unwritable_store_stops_before_generating(tmp_path, monkeypatch):
    (tmp_path/"a-file").write_text("x")              # a file where the store folder should be (unwritable even for root)
    monkeypatch.setenv("SILVERSPOON_STORE", str(tmp_path/"a-file"))
    params = load_params({"study": "normative", "run": "ro", "model": {"backend": "replay", "id": "GPT4"}})
    be = counting()
    with pytest.warns(UserWarning, match="cannot be written"): st = store_for(params, be)
    with pytest.raises(StoreError) as e: generate_all(be, REQS, GenerationParams(), st, run="ro", progress=False)
    msg = str(e.value)
    assert be.calls == [] and "stopped before generating anything and no answer was lost" in msg
    assert f"SILVERSPOON_STORE={tmp_path/'a-file'}" in msg and "Not a directory" in msg


def test_store_failing_mid_run_says_what_is_kept(tmp_path):
    "The store folder disappears after the first batch (a Drive disconnect): the error says what is kept and what is lost."
    folder = tmp_path/"drive"
    class Disconnecting(ScriptedBackend):
        "Before its second batch, the store folder is replaced by a file."
        def generate(self, requests, gen):
            if self.calls: folder.rename(tmp_path/"drive-was"); folder.write_text("gone")
            return super().generate(requests, gen)
    be = Disconnecting(batch_size=3, identity={"backend": "counting"})
    with pytest.raises(StoreError, match=r"could not save a batch of 3 answer\(s\) \(File exists: .*\)\. That batch is lost and will be "
                                         r"generated again by the next run; the 3 answer\(s\) stored before it are kept"):
        generate_all(be, REQS, GenerationParams(), GenerationStore(folder/"s.jsonl"), run="r", progress=False)
    assert sum(be.counts.values()) == 6 and len(_lines(tmp_path/"drive-was"/"s.jsonl")) == 3


def test_committed_reports_carry_no_machine_paths():
    "Reports are read on other machines: no committed report file names this checkout's absolute path (stores are named relative to the project)."
    import subprocess
    files = subprocess.run(["git", "ls-files", "reports"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    texts = [f for f in files if f.endswith((".html", ".json", ".csv"))]
    assert texts
    leaks = [f for f in texts if str(ROOT) in (ROOT/f).read_text(encoding="utf-8", errors="ignore")]
    assert not leaks, f"{leaks[:5]} contain {ROOT}; pass paths through report.project_relpath"


def test_committed_reports_name_their_stores_where_they_are():
    "Every store a committed report names (generation store, instrument cache) is a committed file at that path, relative to the project."
    import subprocess
    tracked = set(subprocess.run(["git", "ls-files", "store"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    named = {}
    for f in sorted(ROOT.glob("reports/*/*/provenance.json")):
        prov = json.loads(f.read_text(encoding="utf-8"))
        for k in ("store", "instruments"):
            if isinstance(prov.get(k), dict) and prov[k].get("path"): named[f"{f.relative_to(ROOT)} {k}"] = prov[k]["path"]
    assert len(named) >= 5, named
    wrong = {k: p for k, p in named.items() if p not in tracked}
    assert not wrong, f"provenance names store files that are not committed at that path: {wrong}"


# ----------------------------------------------------------------------------------------------------
# Edited answers and published files fail verification; FIFO, overlong lines, foreign cache records refused (was tests/test_security_round3_store.py)
SHARED = Path(os.environ.get("SILVERSPOON_DATA") or ROOT.parent/"shared"/"data")
needs_data = pytest.mark.skipif(not (SHARED/"silverspoon").is_dir(), reason="needs the shared data folder (SILVERSPOON_DATA)")


def _sha(p:Path)->str: return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def store_run(tmp_path_factory):
    "A small normative run with a scripted model whose answers are kept in a store outside the project ($SILVERSPOON_STORE)."
    from silverspoon.site.cli import main
    d = tmp_path_factory.mktemp("pin")
    f = d/"pin--scripted.yaml"
    f.write_text(yaml.safe_dump({"study": "normative", "model": {"backend": "scripted", "id": "text:P1"},
                                 "sample": {"n": 12, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 50}}))
    old = os.environ.get("SILVERSPOON_STORE"); os.environ["SILVERSPOON_STORE"] = str(d/"store")
    try: rc = main(["run", str(f), "--reports-dir", str(d/"reports"), "--no-index"])
    finally:
        if old is None: os.environ.pop("SILVERSPOON_STORE", None)
        else: os.environ["SILVERSPOON_STORE"] = old
    assert rc == 0
    return dict(dir=d, file=f, run_dir=d/"reports"/"normative"/"pin--scripted", store=d/"store"/"normative"/"pin--scripted.jsonl")


@pytest.fixture
def env_store(store_run, monkeypatch):
    monkeypatch.setenv("SILVERSPOON_STORE", str(store_run["dir"]/"store"))
    return store_run


@needs_data
def test_fresh_run_pins_its_outputs_and_store(env_store):
    prov = json.loads((env_store["run_dir"]/"provenance.json").read_text())
    c = prov["content"]
    assert {"pin--scripted/summary.csv", "pin--scripted.html", "pin--scripted.ipynb"} <= set(c["outputs"])
    assert "pin--scripted/provenance.json" not in c["outputs"]
    assert set(c["stores"]) == {"$SILVERSPOON_STORE/normative/pin--scripted.jsonl"}            # never this machine's absolute path
    assert prov["store"]["path"] == "$SILVERSPOON_STORE/normative/pin--scripted.jsonl"
    assert str(env_store["dir"]/"store") not in (env_store["run_dir"]/"provenance.json").read_text()   # (the params file here lies outside the project: its path is kept)
    assert verify_provenance(env_store["run_dir"]) == []


@needs_data
def test_edited_stored_answer_fails_verification_naming_the_store(env_store):
    st = env_store["store"]; before = st.read_bytes()
    recs = [json.loads(l) for l in before.decode().splitlines()]
    try:
        st.write_text("".join(json.dumps({**r, "answer": "other"}) + "\n" for r in recs))   # every answer edited, keys kept
        diff = verify_provenance(env_store["run_dir"])
        assert len(diff) == 1 and diff[0].startswith("$SILVERSPOON_STORE/normative/pin--scripted.jsonl: ")
        assert "was edited after the run read it" in diff[0] and "silverspoon run " in diff[0]
    finally: st.write_bytes(before)
    assert verify_provenance(env_store["run_dir"]) == []


# ---------------------------------------------------------------- issue 51 B12: an appended store line never replaces an answer
def test_appended_copy_with_another_answer_is_superseded_not_used(tmp_path):
    path = tmp_path/"s.jsonl"
    df = generate_all(counting(), REQS, GenerationParams(), GenerationStore(path), run="r", progress=False)
    good = {r["item_id"]: r for r in _lines(path)}
    _append_lines(path, {**good["q0"], "answer": "forged"}, {**good["q1"], "answer": None, "error": "boom"}, good["q2"])  # another answer, a failure, an identical copy
    with pytest.warns(UserWarning, match=r"skipped 2 superseded line\(s\) \(line\(s\) 7, 8\)"): st = GenerationStore(path)
    assert st.get(good["q0"]["key"])["answer"] == "ok q0" and st.get(good["q1"]["key"])["answer"] == "ok q1"   # the first answer stands
    assert st.summary()["superseded_lines"] == 2 and st.summary()["superseded"][0].startswith("line 7: key ")
    be = counting()
    df2 = generate_all(be, REQS, GenerationParams(), st, run="r", progress=False)
    assert be.calls == [] and df2.answer.tolist() == df.answer.tolist()


def test_retried_failure_still_gets_its_answer(tmp_path):
    "First usable answer wins, but a failure is not an answer: a rerun's retry replaces it (and is read back after a reload)."
    flaky = ScriptedBackend(lambda r: Generation(None, error="Boom") if r.item_id == "q1" else Generation(f"ok {r.item_id}", "stop"), identity={"backend": "counting"})
    path = tmp_path/"s.jsonl"
    generate_all(flaky, REQS[:3], GenerationParams(), GenerationStore(path), run="r", progress=False)
    df = generate_all(counting(), REQS[:3], GenerationParams(), GenerationStore(path), run="r", progress=False)
    assert df.answer.tolist() == ["ok q0", "ok q1", "ok q2"] and GenerationStore(path).get(df.key[1])["answer"] == "ok q1"
    assert GenerationStore(path).summary()["superseded_lines"] == 0


def test_appended_instrument_cache_line_never_replaces_an_output(tmp_path):
    "Round 3's poisoned cache, by appending: a record with the right key and instrument but another output is never used."
    from silverspoon.instruments.text import Instrument, InstrumentStore, score_cached, text_key, instrument_id
    class Positive(Instrument):
        name = "sentiment"
        def __init__(self): self.calls = 0
        def identity(self): return {"model": "real-classifier"}
        def score(self, texts): self.calls += 1; return [{"positive": 1.0} for _ in texts]
    inst, texts, f = Positive(), ["a kind story", "a brave story"], tmp_path/"narr.instruments.jsonl"
    score_cached(inst, texts, InstrumentStore(f), progress=False)
    _append_lines(f, *({"key": text_key(inst.identity(), t), "instrument": instrument_id(inst.identity()), "out": {"positive": 0.0}} for t in texts))
    with pytest.warns(UserWarning, match="skipped 2 superseded line"): store = InstrumentStore(f)
    assert score_cached(inst, texts, store, progress=False) == [{"positive": 1.0}] * 2 and inst.calls == 1
    assert store.summary()["superseded_lines"] == 2


@needs_data
def test_resumed_run_is_pinned_whole_and_an_append_fails_verification(tmp_path, monkeypatch):
    "A run that adds new keys to its store (a larger sample) pins the whole file; a copy of a record appended afterwards is named by verify_provenance."
    from silverspoon.site.cli import main
    monkeypatch.setenv("SILVERSPOON_STORE", str(tmp_path/"store"))
    f = tmp_path/"grow--scripted.yaml"
    spec = {"study": "normative", "model": {"backend": "scripted", "id": "text:P1"}, "sample": {"n": 6, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 20}}
    f.write_text(yaml.safe_dump(spec))
    assert main(["run", str(f), "--reports-dir", str(tmp_path/"reports"), "--no-index"]) == 0
    st = tmp_path/"store"/"normative"/"grow--scripted.jsonl"; n1 = st.stat().st_size
    spec["sample"]["n"] = 10; f.write_text(yaml.safe_dump(spec))                          # resumed: only the new keys are generated and appended
    assert main(["run", str(f), "--reports-dir", str(tmp_path/"reports"), "--no-index"]) == 0
    run_dir = tmp_path/"reports"/"normative"/"grow--scripted"
    prov = json.loads((run_dir/"provenance.json").read_text())
    pin = prov["content"]["stores"]["$SILVERSPOON_STORE/normative/grow--scripted.jsonl"]
    assert st.stat().st_size > n1 and pin["bytes"] == st.stat().st_size and prov["store"]["superseded_lines"] == 0
    assert verify_provenance(run_dir) == []
    first = st.read_bytes().splitlines()[0]
    _append_lines(st, {**json.loads(first), "answer": "forged"})
    diff = verify_provenance(run_dir)
    assert len(diff) == 1 and diff[0].startswith("$SILVERSPOON_STORE/normative/grow--scripted.jsonl: ") and "appended after the run read" in diff[0], diff


@needs_data
@pytest.mark.parametrize("name", ["pin--scripted/summary.csv", "pin--scripted.html"])
def test_edited_published_file_fails_verification_naming_it(env_store, name):
    f = env_store["run_dir"].parent/name; before = f.read_bytes()
    try:
        f.write_bytes(before.replace(b"0.", b"1.", 1) + b"\n")
        diff = verify_provenance(env_store["run_dir"])
        assert [m.split(": ")[0] for m in diff] == [str(f)]
        assert "was changed after the run wrote it" in diff[0] and f"silverspoon run {env_store['file']}" in diff[0]
    finally: f.write_bytes(before)
    assert verify_provenance(env_store["run_dir"]) == []


@needs_data
def test_edited_data_list_with_recomputed_sha256_still_fails(env_store):
    p = env_store["run_dir"]/"provenance.json"; before = p.read_bytes()
    prov = json.loads(before); c = prov["content"]
    dropped = sorted(c["data"])[0]
    del c["data"][dropped]
    c["sha256"] = stable_hash({"files": c["files"], "data": c["data"], "stores": c["stores"]}, 64)   # the attacker recomputes it
    try:
        p.write_text(json.dumps(prov))
        diff = verify_provenance(env_store["run_dir"])
        assert diff and diff[0].startswith(f"{dropped}: declared by the study") and "missing from the report's data list" in diff[0]
    finally: p.write_bytes(before)


# ---------------------------------------------------------------- issue 51 B10: provenance.json itself is pinned
@needs_data
@pytest.mark.parametrize("attack", ["replay backend", "served model fields deleted"])
def test_edited_provenance_json_fails_verification_and_is_not_trusted_by_the_card(env_store, attack):
    from silverspoon.site.card import served_model_of
    from silverspoon.site.headline_power import is_released_run
    p = env_store["run_dir"]/"provenance.json"; before = p.read_bytes()
    prov = json.loads(before)
    assert not is_released_run(env_store["run_dir"]) and served_model_of(env_store["run_dir"]) == ""
    if attack == "replay backend": prov["params"]["model"]["backend"] = "replay"           # puts the run into the released-models column
    else: prov["engine"] = {k: v for k, v in (prov.get("engine") or {}).items() if "served" not in k}   # hides a mismatch warning
    if attack != "replay backend": prov["wall_seconds"] = prov.get("wall_seconds", 0) + 1  # (a scripted run records no served model: change something besides)
    try:
        p.write_text(json.dumps(prov, indent=1))
        diff = verify_provenance(env_store["run_dir"])
        assert any(d.startswith(f"{p}: was edited after the run wrote it") for d in diff), diff   # (naming the replay backend also asks for its code in the record: a second difference)
        assert not is_released_run(env_store["run_dir"])                                  # the edited record is never read for the card
        assert served_model_of(env_store["run_dir"]).startswith("served model unknown: provenance.json is not the record the run wrote")
    finally: p.write_bytes(before)
    assert verify_provenance(env_store["run_dir"]) == [] and served_model_of(env_store["run_dir"]) == ""


def test_fifo_store_file_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path/"run.jsonl")
    with pytest.raises(StoreError, match=r"is a FIFO \(named pipe\), not a regular file.*Fix: remove it"):
        GenerationStore(tmp_path/"run.jsonl")       # returns at once: opened without waiting for a writer


def test_overlong_store_line_is_refused_not_loaded(tmp_path):
    with open(tmp_path/"run.jsonl", "wb") as f: f.write(b'{"key": "' + b"x" * (MAX_LINE_BYTES + 1))
    with pytest.raises(StoreError, match=r"line 1 is longer than 16 MiB.*Fix: remove that line"):
        GenerationStore(tmp_path/"run.jsonl")


# --- 4, second half: an instrument-cache record tagged with another instrument is refused -------------------------------

def test_cache_record_of_another_instrument_is_refused(tmp_path):
    from silverspoon.core import SilverspoonError
    from silverspoon.instruments.text import Instrument, InstrumentStore, score_cached, text_key, instrument_id
    class Positive(Instrument):
        name = "sentiment"
        def __init__(self, ident): self.ident, self.calls = ident, 0
        def identity(self): return self.ident
        def score(self, texts): self.calls += 1; return [{"positive": 1.0} for _ in texts]
    real, other = Positive({"model": "real-classifier"}), Positive({"model": "other-classifier"})
    texts = ["a kind story", "a brave story"]
    f = tmp_path/"narr.instruments.jsonl"
    assert score_cached(real, texts, InstrumentStore(f), progress=False) == [{"positive": 1.0}] * 2
    # the attack: the real instrument's keys kept, the outputs flipped and tagged with another instrument
    f.write_text("".join(json.dumps({"key": text_key(real.identity(), t), "instrument": instrument_id(other.identity()),
                                     "out": {"positive": 0.0}}) + "\n" for t in texts))
    before, store = _sha(f), InstrumentStore(f)
    with pytest.raises(SilverspoonError, match=rf"{f}: 2 cached output\(s\) of sentiment .* field `instrument` = {instrument_id(other.identity())}.*Fix: remove those lines"):
        score_cached(real, texts, store, progress=False)
    assert store.counts == {} and _sha(f) == before          # nothing credited to the real instrument, nothing written


# ----------------------------------------------------------------------------------------------------
# A store outside the project is never published as an absolute path (was tests/test_security_round3_http2.py, lines 264-293)
# --- a store outside the project is never published as an absolute path (whole flow) -------------------------------------


@pytest.mark.skipif(not (SHARED/"silverspoon").is_dir(), reason="needs the shared data folder (SILVERSPOON_DATA)")
def test_an_outside_store_is_never_published_as_an_absolute_path(tmp_path, cli, monkeypatch):
    import yaml
    store = tmp_path/"elsewhere"/"my-private-store"                      # outside the project, a sibling of params and reports
    monkeypatch.setenv("SILVERSPOON_STORE", str(store))
    f = tmp_path/"params"/"outside--scripted.yaml"; f.parent.mkdir()
    f.write_text(yaml.safe_dump({"study": "normative", "model": {"backend": "scripted", "id": "text:P1"},
                                 "sample": {"n": 12, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 50}}))
    reports = tmp_path/"reports"
    r = cli("run", f, "--reports-dir", reports)                           # run, publish the report folder, the page and the index
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert (store/"normative"/"outside--scripted.jsonl").stat().st_size > 0    # the answers did go to the outside store
    published = [p for p in reports.rglob("*") if p.is_file()]
    kinds = {p.suffix for p in published}
    assert {".html", ".ipynb", ".csv", ".json"} <= kinds and any(p.name == "provenance.json" for p in published), kinds
    assert (reports/"index.html").is_file() and (reports/"normative"/"outside--scripted.html").is_file()
    needles = {str(store), str(store.resolve()), str(store.parent), "my-private-store"}
    for p in published:
        text = p.read_bytes().decode("utf-8", "replace")
        leaked = [n for n in needles if n in text]
        assert not leaked, f"{p.relative_to(reports)} names the store's absolute path: {leaked}"
    prov = json.loads(next(p for p in published if p.name == "provenance.json").read_text())
    assert prov["store"]["path"] == "$SILVERSPOON_STORE/normative/outside--scripted.jsonl"
