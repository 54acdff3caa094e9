"""Red-team round 3 (issue 31), finding 4 and the store/provenance lows, each replayed: an edited stored answer, an
edited summary.csv or HTML page, an instrument-cache record tagged with another instrument, an edited provenance data
list with its sha256 recomputed, a FIFO store file, an overlong store line, and a store root outside the project."""
import os, json, hashlib
from pathlib import Path
import pytest, yaml
from conftest import ROOT
from silverspoon.core import load_params, stable_hash
from silverspoon.site.runner import verify_provenance
from silverspoon.engine.store import GenerationStore, StoreError, MAX_LINE_BYTES

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
        st.write_bytes(before + json.dumps(recs[0]).encode() + b"\n")                       # a later append keeps the pin
        assert verify_provenance(env_store["run_dir"]) == []
    finally: st.write_bytes(before)


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
