"Tests of silverspoon.engine.data: checksums, error messages, downloads (offline, via a local HTTP server) and the normative loader (silverspoon.studies.silverspoon.normative)."
import dataclasses, functools, hashlib, http.server, os, threading, zipfile
from pathlib import Path

import pandas as pd
import pytest

from silverspoon.engine import data
from silverspoon.core import DataError, ParamsError
from silverspoon.engine.data import REGISTRY, fetch, lookup, verify_all
from silverspoon.studies.silverspoon import normative as nd   # the normative loader lives with its study
from silverspoon.studies.silverspoon.normative import load_normative, build_normative

SHARED = Path(os.environ.get("SILVERSPOON_DATA") or "/work/shared/data")
HAVE_SHARED = (SHARED/"silverspoon"/"silverSpoonHumanBinary.csv").is_file()
needs_shared = pytest.mark.skipif(not HAVE_SHARED, reason="needs the shared data folder (set SILVERSPOON_DATA)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    "Download mode: no SILVERSPOON_DATA, an empty cache folder, a fresh verification cache."
    monkeypatch.delenv("SILVERSPOON_DATA", raising=False)
    monkeypatch.setenv("SILVERSPOON_CACHE", str(tmp_path/"cache"))
    monkeypatch.setattr(data, "_VERIFIED", {})
    return tmp_path/"cache"


@pytest.fixture
def server(tmp_path):
    "A local HTTP server on 127.0.0.1 serving tmp_path/'srv'; yields (folder, base url, list of request paths)."
    root = tmp_path/"srv"; root.mkdir()
    requests = []
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            requests.append(self.path); return super().do_GET()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try: yield root, f"http://127.0.0.1:{srv.server_address[1]}", requests
    finally: srv.shutdown(); srv.server_close()


def _copy_into(folder: Path, name: str, corrupt: bool = False) -> Path:
    "Copy the shared file of registry entry `name` into `folder` (same relpath), optionally with one byte changed."
    f = lookup(name); dst = folder/f.relpath; dst.parent.mkdir(parents=True, exist_ok=True)
    b = (SHARED/f.relpath).read_bytes()
    if corrupt: b = bytes([b[0] ^ 1]) + b[1:]
    dst.write_bytes(b)
    return dst


# ---------------------------------------------------------------- registry

def test_registry_is_consistent():
    fs = list(REGISTRY.values())
    assert len({f.relpath for f in fs}) == len(fs)
    assert all(len(f.sha256 or f.git_blob or "") == (64 if f.sha256 else 40) and len(f.commit) == 40 for f in fs)   # no sha256 known: git blob id
    assert all(f.url is None for f in fs if "/derived/" in f.relpath)
    assert all(f.obtainable for f in fs)                    # downloaded, or built from pinned sources
    assert all(f.url.startswith("https://raw.githubusercontent.com/") for f in fs if f.url)
    for name in ["silverspoon/human", "silverspoon/llms", "silverspoon/topics", "silverspoon/prompts_full", "silverspoon/prompt_templates",
                 "stop/full", "stop/full_labelled", "stop/evaluation_prompt", "stop/demographic/age", "stop/severity_labelled/high",
                 "reference-letters/clg_letters", "bls-oews/national_M2024", "bbq/Age", "crows-pairs/pairs"]:
        assert name in REGISTRY
    z = REGISTRY["silverspoon/llms"]
    assert (z.archive, z.member, z.archive_sha256[:8]) == ("SilverSpoon.zip", "silverSpoonLLMsBinary.csv", "e9107014")
    assert z.url.endswith("/652152d5d1dadbd803e4950da1078a3de4f1353b/SilverSpoon.zip")


def test_lookup_by_relpath_and_unknown_name():
    assert lookup("crows-pairs/data/crows_pairs_anonymized.csv").name == "crows-pairs/pairs"
    with pytest.raises(DataError, match="Did you mean stop/full"): lookup("stop/ful")


@needs_shared
def test_registry_matches_shared_copy(monkeypatch):
    monkeypatch.setenv("SILVERSPOON_DATA", str(SHARED))
    v = verify_all()
    assert set(v.columns) >= {"name", "relpath", "present", "sha256_ok"}
    assert v[v.present].sha256_ok.all()
    assert set(v[~v.present].name) == {"bbq/Gender_identity", "bbq/Race_ethnicity", "bbq/Race_x_SES", "bbq/Race_x_gender",
                                       "bbq/SES", "bbq/additional_metadata", "stereoset/dev"}
    for f in REGISTRY.values():
        p = SHARED/f.relpath
        if p.is_file(): assert p.stat().st_size == f.size, f.relpath


# ---------------------------------------------------------------- errors

@needs_shared
def test_checksum_mismatch_names_file_and_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_VERIFIED", {})
    bad = _copy_into(tmp_path/"data", "stop/demographic/weight", corrupt=True)
    monkeypatch.setenv("SILVERSPOON_DATA", str(tmp_path/"data"))
    f = lookup("stop/demographic/weight")
    with pytest.raises(DataError) as e: fetch(f.name)
    msg = str(e.value)
    actual = hashlib.sha256(bad.read_bytes()).hexdigest()
    for part in [f.relpath, str(bad.resolve()), f"expected sha256 {f.sha256[:12]}", f"got {actual[:12]}",
                 "Fix:", "SILVERSPOON_DATA", f.url]:
        assert part in msg, part
    assert isinstance(e.value, FileNotFoundError)       # DataError is a FileNotFoundError too
    v = verify_all([f.name, "stop/full"])
    assert v.present.tolist() == [True, False] and v.sha256_ok.tolist() == [False, False]


@needs_shared
def test_checksum_mismatch_in_cache_says_delete_to_redownload(cache):
    bad = _copy_into(cache/"data", "stop/demographic/weight", corrupt=True)
    f = lookup("stop/demographic/weight")
    with pytest.raises(DataError, match="checksum mismatch") as e: fetch(f.name, download=False)
    assert f"delete {bad.resolve()} to re-download it from {f.url}" in str(e.value)


def test_missing_file_message(tmp_path, monkeypatch):
    monkeypatch.setenv("SILVERSPOON_DATA", str(tmp_path))
    f = lookup("stop/full")
    with pytest.raises(DataError) as e: fetch("stop/full")
    msg = str(e.value)
    for part in ["stop/STOP-full.json: not found at", str(tmp_path.resolve()/"stop"/"STOP-full.json"), f.url,
                 "set SILVERSPOON_DATA to a folder holding stop/STOP-full.json", "unset SILVERSPOON_DATA"]:
        assert part in msg, part


def test_missing_derived_file_is_built_from_its_sources(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("SILVERSPOON_MIRROR", str(tmp_path/"empty-mirror")); (tmp_path/"empty-mirror").mkdir()
    f = lookup("silverspoon/prompt_templates")
    with pytest.raises(DataError) as e: fetch(f.name, progress=False)
    msg = str(e.value)              # the first source notebook is looked for in the mirror, in place of the public host
    src = tmp_path/"empty-mirror"/f.repo/f.commit/f.sources[0].path
    assert f"download from {src.resolve().as_uri()}" in msg and f"SILVERSPOON_MIRROR stands in for {f.source_urls[0]}" in msg
    assert f"{f.sources[0].path} (source of {f.relpath})" in msg
    assert not (cache/"data"/f.relpath).exists()
    monkeypatch.setenv("SILVERSPOON_DATA", str(tmp_path/"data"))
    with pytest.raises(DataError) as e: fetch(f.name)
    assert "built from https://raw.githubusercontent.com/keshariS/socioEcoBias/" not in str(e.value)   # the mirror's URL is named instead
    assert "unset SILVERSPOON_DATA" in str(e.value)


def test_download_false_does_not_download(cache):
    with pytest.raises(DataError, match="download=False"): fetch("stop/full", download=False)
    assert not (cache/"data").exists()


@needs_shared
def test_verification_is_cached_per_path_size_mtime(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_VERIFIED", {})
    calls = []
    real = data.sha256_file
    monkeypatch.setattr(data, "sha256_file", lambda p, *a, **k: calls.append(p) or real(p, *a, **k))
    p = _copy_into(tmp_path/"data", "stop/demographic/weight")
    monkeypatch.setenv("SILVERSPOON_DATA", str(tmp_path/"data"))
    for _ in range(3): assert fetch("stop/demographic/weight") == p.resolve()
    assert len(calls) == 1
    st = p.stat(); os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))   # touched: hash again
    fetch("stop/demographic/weight")
    assert len(calls) == 2


# ---------------------------------------------------------------- downloads (offline)

def _served_entry(server, monkeypatch, name="stop/demographic/weight"):
    "Serve the entry's bytes locally and point the registry entry at that URL; returns (entry, bytes)."
    root, base, _ = server
    f = REGISTRY[name]
    if HAVE_SHARED: body = (SHARED/f.relpath).read_bytes()
    else:
        body = b'[{"prompts": [], "cfprompt": ""}]\n'
        f = dataclasses.replace(f, sha256=hashlib.sha256(body).hexdigest(), size=len(body))
    (root/"weight.json").write_bytes(body)
    f = dataclasses.replace(f, url=f"{base}/weight.json")
    monkeypatch.setitem(REGISTRY, name, f)
    return f, body


def test_download_into_cache(server, cache, monkeypatch):
    f, body = _served_entry(server, monkeypatch)
    p = fetch(f.name, progress=False)
    assert p == cache/"data"/f.relpath and p.read_bytes() == body
    assert hashlib.sha256(p.read_bytes()).hexdigest() == f.sha256
    assert not list((cache/"data").rglob("*.part"))
    n = len(server[2])
    assert fetch(f.relpath, progress=False) == p and len(server[2]) == n   # present: no second request


def test_corrupted_download_is_rejected(server, cache, monkeypatch):
    f, body = _served_entry(server, monkeypatch)
    (server[0]/"weight.json").write_bytes(body[:-10] + b"0123456789")
    with pytest.raises(DataError) as e: fetch(f.name, progress=False)
    msg = str(e.value)
    assert f.relpath in msg and f.url in msg and "fails its checksum" in msg and f"expected sha256 {f.sha256[:12]}" in msg
    assert not (cache/"data"/f.relpath).exists()
    assert not list(cache.rglob("*.part"))


def test_http_error_is_a_data_error(server, cache, monkeypatch):
    f, _ = _served_entry(server, monkeypatch)
    monkeypatch.setitem(REGISTRY, f.name, dataclasses.replace(f, url=f.url.replace("weight.json", "missing.json")))
    with pytest.raises(DataError, match="download from .*missing.json failed"): fetch(f.name, progress=False)
    assert not list(cache.rglob("*.part"))


def test_archive_member_download(server, cache, monkeypatch):
    root, base, requests = server
    body = b"text,Low_bin,Up_bin\nhello,1,0\n"
    with zipfile.ZipFile(root/"S.zip", "w") as z:
        z.writestr("SilverSpoon/m.csv", body); z.writestr("__MACOSX/SilverSpoon/._m.csv", b"junk"); z.writestr("other.csv", b"x")
    zsha = hashlib.sha256((root/"S.zip").read_bytes()).hexdigest()
    mk = lambda name, member: data.DataFile(name=name, relpath=f"demo/{member}", sha256=hashlib.sha256(body if member == "m.csv" else b"x").hexdigest(),
                                            size=None, repo="o/r", commit="c"*40, source_path="S.zip", url=f"{base}/S.zip", licence="MIT",
                                            archive="S.zip", member=member, archive_sha256=zsha)
    monkeypatch.setitem(REGISTRY, "demo/m", mk("demo/m", "m.csv"))
    monkeypatch.setitem(REGISTRY, "demo/other", mk("demo/other", "other.csv"))
    assert fetch("demo/m", progress=False).read_bytes() == body
    assert fetch("demo/other", progress=False).read_bytes() == b"x"
    assert requests.count("/S.zip") == 1                                      # the verified zip is reused
    monkeypatch.setitem(REGISTRY, "demo/m", dataclasses.replace(REGISTRY["demo/m"], sha256="0"*64, relpath="demo/m2.csv"))
    with pytest.raises(DataError, match="fails its checksum"): fetch("demo/m", progress=False)
    assert not (cache/"data"/"demo"/"m2.csv").exists()


# ---------------------------------------------------------------- normative loader

@pytest.fixture(scope="module")
def normative():
    if not HAVE_SHARED: pytest.skip("needs the shared data folder")
    old = os.environ.get("SILVERSPOON_DATA"); os.environ["SILVERSPOON_DATA"] = str(SHARED)
    try: yield load_normative()
    finally:
        if old is None: os.environ.pop("SILVERSPOON_DATA", None)
        else: os.environ["SILVERSPOON_DATA"] = old


def test_load_normative_shape_and_columns(normative):
    df = normative
    models = nd.RELEASED_MODELS
    assert df.shape == (3000, 8 + 2*len(models))
    assert list(df.columns[:8]) == ["item_id", "row", "scenario_id", "variant", "text", "low", "up", "topic"]
    assert all(m in df and f"{m}_bin" in df for m in models)
    assert df.item_id.tolist() == [f"normative-{i:04d}" for i in range(3000)]
    assert df.row.tolist() == list(range(3000)) and (df.scenario_id == df.row % 1000).all() and (df.variant == df.row // 1000).all()
    assert isinstance(df.text.dtype, pd.StringDtype) and isinstance(df.GPT4.dtype, pd.StringDtype)
    assert all(str(df[f"{m}_bin"].dtype) == "Int64" for m in models)
    assert df.low.dtype == "int64" and df.up.dtype == "int64" and df.topic.dtype == "int64"
    assert set(df.low) == set(df.up) == {0, 1} and set(df.topic) == set(range(10))
    assert df.Yi6B.isna().sum() == 42 and df.Llama13B.isna().sum() == 1


def test_normative_invariants(normative):
    df = normative
    for c in ["low", "up"]:        # gold labels are copied to the two augmented variants of each scenario
        w = df.pivot(index="scenario_id", columns="variant", values=c)
        assert (w[0] == w[1]).all() and (w[0] == w[2]).all()
    sc = nd.scenario_consistency(df)
    assert sc.loc["low", "n_consistent"] == sc.loc["up", "n_consistent"] == 1000
    assert (df.low == df.up).sum() == 1749


def test_build_normative_rejects_misaligned_files(monkeypatch):
    if not HAVE_SHARED: pytest.skip("needs the shared data folder")
    monkeypatch.setenv("SILVERSPOON_DATA", str(SHARED))
    h, l, t = (nd._read_csv(fetch(n)) for n in nd.NORMATIVE_FILES)
    l2 = l.copy(); l2.loc[42, "text"] = "x"
    with pytest.raises(DataError, match=r"silverSpoonHumanBinary.csv and silverSpoonLLMsBinary.csv are not row-aligned.*row 42"):
        build_normative(h, l2, t)
    t2 = t.copy(); t2.loc[7, "Lower-end label"] = "maybe"
    with pytest.raises(DataError, match="must be P1 or Other"): build_normative(h, l, t2)
    l3 = l.copy(); l3["GPT4_bin"] = l3["GPT4_bin"].astype(object); l3.loc[3, "GPT4_bin"] = 2
    with pytest.raises(DataError, match="GPT4_bin must hold 0/1"): build_normative(h, l3, t)
    with pytest.raises(DataError, match="expected 3000 rows"): build_normative(h.iloc[:10], l, t)


def test_released_answers(normative):
    a = nd.released_answers(normative, "Yi6B")
    assert len(a) == 3000 and sum(v is None for v in a.values()) == 42
    assert all(v is None or isinstance(v, str) for v in a.values())
    with pytest.raises(ParamsError): nd.released_answers(normative, "GPT-4o")


def test_paper_table2():
    t = nd.PAPER_TABLE2
    assert len(t) == 60 and set(t.metric) == {"acc", "kappa", "jaccard_paper", "dice_paper", "mcc"}
    assert nd.PAPER_ROWS["GPT4o"] == "GPT4" and nd.PAPER_ROWS["Gemma"] == "GPT3.5" and "Llama7B" not in nd.PAPER_ROWS.values()
    row = t[(t.paper_row == "Alpaca") & (t.gold == "low")].set_index("metric").paper
    assert row["acc"] == 0.582 and row["kappa"] == -0.033 and row["mcc"] == -0.038
    acc = t[t.metric == "acc"].set_index(["paper_row", "gold"]).paper
    jsc = t[t.metric == "jaccard_paper"].set_index(["paper_row", "gold"]).paper
    assert ((acc/(2 - acc)).round(3) - jsc).abs().max() < 0.0015      # JSC = ACC/(2-ACC) as the paper defines it
