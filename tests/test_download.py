"""The whole download path, offline: every registry file fetched through SILVERSPOON_MIRROR (a folder, and
http://127.0.0.1) into an empty cache, the derived files and the BLS table built from their sources, every sha256
checked; a mirror that serves a wrong byte is refused; one error lists every file that cannot be had.

The mirror is built from the shared data folder. The files no data folder holds (SilverSpoon.zip, the authors'
source files of the derived files, the BLS workbook) come from SILVERSPOON_TEST_UPSTREAM, a folder laid out like a
mirror (<owner>/<repo>/<commit>/<path>) that holds the real upstream files, when it is set. Otherwise the test
writes stand-ins: a zip of the shared CSVs, source files whose literals are the released values, and a workbook of
the released CSV; their pins are patched, while the pins of the files built from them stay the real ones."""
import contextlib, dataclasses, functools, hashlib, http.server, json, os, shutil, threading, zipfile
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from silverspoon.engine import data
from silverspoon.core import DataError
from silverspoon.engine.data import (REGISTRY, PUBLIC_HOST, Source, build_mirror, fetch, fetch_all, lookup, module_literals, xlsx_rows,
                              xlsx_to_csv)

SHARED = Path(os.environ.get("SILVERSPOON_DATA") or "/work/shared/data")
HAVE_SHARED = (SHARED/"silverspoon"/"silverSpoonHumanBinary.csv").is_file()
needs_shared = pytest.mark.skipif(not HAVE_SHARED, reason="needs the shared data folder (set SILVERSPOON_DATA)")
UPSTREAM = Path(os.environ["SILVERSPOON_TEST_UPSTREAM"]) if os.environ.get("SILVERSPOON_TEST_UPSTREAM") else None
needs_upstream = pytest.mark.skipif(UPSTREAM is None, reason="needs the real upstream files (set SILVERSPOON_TEST_UPSTREAM to a mirror-layout folder)")
sha = lambda b: hashlib.sha256(b).hexdigest()
REQUIRED = sorted(n for n, f in REGISTRY.items() if not f.optional)


@contextlib.contextmanager
def serve(folder, seconds=120):
    "Serve `folder` on http://127.0.0.1:<free port> from a thread; yields (base URL, request paths). Stops when the block ends, or by itself after `seconds`."
    seen = []
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self): seen.append(self.path); return super().do_GET()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True); t.start()
    stop = threading.Timer(seconds, srv.shutdown); stop.daemon = True; stop.start()
    try: yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        stop.cancel(); srv.shutdown(); srv.server_close(); t.join(10)


@pytest.fixture
def download_mode(tmp_path, monkeypatch):
    "SILVERSPOON_DATA unset, a fresh verification cache; returns a function that points SILVERSPOON_CACHE at a new empty folder."
    monkeypatch.delenv("SILVERSPOON_DATA", raising=False)
    monkeypatch.delenv("SILVERSPOON_MIRROR", raising=False)
    def fresh(name):
        monkeypatch.setattr(data, "_VERIFIED", {})
        monkeypatch.setenv("SILVERSPOON_CACHE", str(tmp_path/name))
        return tmp_path/name
    return fresh


def write_xlsx(path, rows):
    "A minimal workbook whose first sheet holds `rows` (str as shared strings, int/float as numbers, None as no cell)."
    col = lambda j: (col(j//26 - 1) if j >= 26 else "") + chr(65 + j % 26)
    strings, index, xml_rows = [], {}, []
    for i, row in enumerate(rows, 1):
        cells = []
        for j, v in enumerate(row):
            if v is None: continue
            if isinstance(v, str):
                if v not in index: index[v] = len(strings); strings.append(v)
                cells.append(f'<c r="{col(j)}{i}" t="s"><v>{index[v]}</v></c>')
            else: cells.append(f'<c r="{col(j)}{i}"><v>{v!r}</v></c>')
        xml_rows.append(f'<row r="{i}">{"".join(cells)}</row>')
    m = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("xl/workbook.xml", f'<workbook {m} xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
                                      '<sheets><sheet name="data" sheetId="1" r:id="rId1"/></sheets></workbook>')
        z.writestr("xl/_rels/workbook.xml.rels", '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                                                 '<Relationship Id="rId1" Target="worksheets/sheet1.xml"/></Relationships>')
        z.writestr("xl/sharedStrings.xml", f"<sst {m}>" + "".join(f'<si><t xml:space="preserve">{escape(s)}</t></si>' for s in strings) + "</sst>")
        z.writestr("xl/worksheets/sheet1.xml", f"<worksheet {m}><sheetData>{''.join(xml_rows)}</sheetData></worksheet>")


def csv_as_cells(text):
    "The cells a workbook must hold to convert back to this CSV: a field that Python writes back unchanged as a number is a number."
    import csv, io
    def cell(x):
        if x == "": return None
        for t in (int, float):
            try:
                if str(t(x)) == x: return t(x)
            except ValueError: pass
        return x
    return [[cell(x) for x in r] for r in csv.reader(io.StringIO(text))]


# ---------------------------------------------------------------- the converter and the literal reader

def test_xlsx_converter_on_a_synthetic_workbook(tmp_path):
    rows = [["OCC_CODE", "OCC_TITLE", "TOT_EMP", "H_MEAN", "A_MEDIAN", "ANNUAL", "NOTE"],
            ["00-0000", "All Occupations", 154187380, 32.66, 49500, None, None],
            ["35-2011", "Cooks, Fast Food", 668230, 14.97, 30160, None, 'say "hi"'],
            ["29-1211", "Anesthesiologists", 41890, 161.85, "#", "TRUE", "Café & <co>\nline two"],
            ["000000", "Dishwashers", 471670, 20, "*", None, None]]
    write_xlsx(tmp_path/"t.xlsx", rows)
    assert xlsx_rows(tmp_path/"t.xlsx") == rows
    assert xlsx_to_csv(tmp_path/"t.xlsx").decode("utf-8") == (
        "OCC_CODE,OCC_TITLE,TOT_EMP,H_MEAN,A_MEDIAN,ANNUAL,NOTE\n"
        "00-0000,All Occupations,154187380,32.66,49500,,\n"
        '35-2011,"Cooks, Fast Food",668230,14.97,30160,,"say ""hi"""\n'
        '29-1211,Anesthesiologists,41890,161.85,#,TRUE,"Café & <co>\nline two"\n'
        "000000,Dishwashers,471670,20,*,,\n")


@needs_shared
def test_a_workbook_of_the_released_bls_csv_converts_back_byte_for_byte(tmp_path):
    released = (SHARED/lookup("bls-oews/national_M2024").relpath).read_bytes()
    write_xlsx(tmp_path/"bls.xlsx", csv_as_cells(released.decode("utf-8")))
    assert sha(xlsx_to_csv(tmp_path/"bls.xlsx")) == REGISTRY["bls-oews/national_M2024"].sha256


def test_the_authors_code_is_read_never_run(tmp_path):
    marker = tmp_path/"ran"
    src = f"open({str(marker)!r}, 'w').write('x')\nWORDS = ['warm', 'kind']\nOTHER = __import__('os').getcwd()\n"
    assert module_literals(src, ["WORDS"]) == {"WORDS": ["warm", "kind"]}
    with pytest.raises(DataError, match="line 3: `OTHER` is not a literal value"): module_literals(src, ["OTHER"], "w.py")
    assert not marker.exists()


# ---------------------------------------------------------------- stand-ins for the upstream-only files

def _stand_in_sources(f):
    "{source path: bytes} whose literals, read by `f`'s builder, give the released file's values."
    released = json.loads((SHARED/f.relpath).read_text(encoding="utf-8"))
    if f.build == "py_literals":
        return {f.sources[0].path: "".join(f"{k} = {v!r}\n" for k, v in released.items() if k != "_source").encode()}
    if f.build == "stop_preamble":
        models = released["models_supported_in_code"]
        gpt, rest = [m for m in models if m.startswith("gpt")], [m for m in models if not m.startswith("gpt")] + ["org/model:finetuned"]
        return {f.sources[0].path: (f"def get_response(prompt, llm_name):\n    if llm_name in {gpt!r}:\n        return 1\n"
                                    f"    elif llm_name in {rest!r}:\n        return 2\n\ndef evaluate(dataset):\n    for entry in dataset:\n"
                                    f"        convo_log = {released['conversation_preamble']!r}\n        convo_log = f'{{convo_log}} more'\n").encode()}
    if f.build == "notebook_prompts":
        out = {}
        for s in f.sources:
            ts = [t for t in released["templates"] if t["notebook"] == s.path]
            cells = [{"cell_type": "markdown", "metadata": {}, "source": ["filler"]} for _ in range(max(t["cell_index"] for t in ts) + 2)]
            cells[-1] = {"cell_type": "code", "metadata": {}, "source": ["!pip install openai\n", "prompt = 'from a shell cell'"]}
            for t in ts:
                c = cells[t["cell_index"]]
                if c["cell_type"] == "markdown": c.update(cell_type="code", source=[])
                c["source"].append(f"{t['variable']} = {t['value']!r}\n")
            out[s.path] = json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}).encode()
        return out
    raise AssertionError(f"no stand-in for builder {f.build!r}")


def stand_in_upstream(mirror, tmp_path, monkeypatch):
    "Write stand-ins for every upstream-only file into `mirror` and pin them in the registry (monkeypatched)."
    ss = [REGISTRY["silverspoon/human"], REGISTRY["silverspoon/llms"]]
    zp = mirror/ss[0].url[len(PUBLIC_HOST):]; zp.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zp, "w", zipfile.ZIP_DEFLATED) as z:
        for f in ss: z.write(SHARED/f.relpath, f.member)
    for f in ss: monkeypatch.setitem(REGISTRY, f.name, dataclasses.replace(f, archive_sha256=sha(zp.read_bytes())))
    for f in [f for f in REGISTRY.values() if f.build]:
        if f.build == "xlsx_csv":
            write_xlsx(tmp_path/"w.xlsx", csv_as_cells((SHARED/f.relpath).read_text(encoding="utf-8")))
            files = {f.sources[0].path: (tmp_path/"w.xlsx").read_bytes()}
        else: files = _stand_in_sources(f)
        for p, b in files.items():
            dst = mirror/f.repo/f.commit/p; dst.parent.mkdir(parents=True, exist_ok=True); dst.write_bytes(b)
        monkeypatch.setitem(REGISTRY, f.name, dataclasses.replace(f, sources=tuple(Source(s.path, len(files[s.path]), sha(files[s.path])) for s in f.sources)))


def full_mirror(mirror, tmp_path, monkeypatch):
    "A mirror folder holding every upstream file of the registry that exists anywhere here: from the shared folder, then the upstream files."
    build_mirror(mirror, SHARED)
    if UPSTREAM: shutil.copytree(UPSTREAM, mirror, dirs_exist_ok=True)
    else: stand_in_upstream(mirror, tmp_path, monkeypatch)
    m = build_mirror(mirror, SHARED)
    missing = {n for names in m.loc[~m.in_mirror, "needed_by"] for n in names}
    assert missing == {n for n, f in REGISTRY.items() if f.optional}, missing    # only the files the shared copy lacks
    return m


# ---------------------------------------------------------------- every file through a mirror

@needs_shared
def test_every_registry_file_from_a_folder_mirror_and_an_http_mirror(tmp_path, monkeypatch, download_mode):
    m = full_mirror(tmp_path/"mirror", tmp_path, monkeypatch)
    opened = []
    real_stream = data._stream
    monkeypatch.setattr(data, "_stream", lambda url, *a: opened.append(url) or real_stream(url, *a))
    with serve(tmp_path/"mirror") as (base, seen):
        for i, mirror in enumerate([str(tmp_path/"mirror"), base]):
            opened.clear()
            cache = download_mode(f"cache-{i}")
            monkeypatch.setenv("SILVERSPOON_MIRROR", mirror)
            got = fetch_all(progress=False)                         # the 7 files the shared copy lacks are optional: skipped
            assert sorted(got) == REQUIRED
            for name, p in got.items():
                f = REGISTRY[name]
                assert p == cache/"data"/f.relpath and sha(p.read_bytes()) == f.sha256 and p.stat().st_size == f.size, name
            assert len(opened) == len(m) and not [u for u in opened if u.startswith(PUBLIC_HOST)]   # each upstream file asked for once, never from the public host
            assert not list(cache.rglob("*.part"))
        assert sorted(seen) == sorted(f"/{p}" for p in m.mirror_path)     # the HTTP pass: every upstream file, each once


@needs_shared
def test_a_mirror_serving_a_wrong_byte_is_refused(tmp_path, monkeypatch, download_mode):
    full_mirror(tmp_path/"mirror", tmp_path, monkeypatch)
    direct, built = REGISTRY["stop/demographic/weight"], REGISTRY["reference-letters/cbg_prompt_templates"]
    for p in [tmp_path/"mirror"/direct.url[len(PUBLIC_HOST):], tmp_path/"mirror"/built.repo/built.commit/built.sources[0].path]:
        b = p.read_bytes(); p.write_bytes(b[:40] + bytes([b[40] ^ 1]) + b[41:])
    with serve(tmp_path/"mirror") as (base, _):
        cache = download_mode("cache")
        monkeypatch.setenv("SILVERSPOON_MIRROR", base)
        with pytest.raises(DataError) as e: fetch(direct.name, progress=False)
        msg = str(e.value)
        assert f"the file downloaded from {base}/{direct.url[len(PUBLIC_HOST):]}" in msg and f"stands in for {direct.url}" in msg
        assert "fails its checksum" in msg and f"expected sha256 {direct.sha256[:12]}" in msg and "replace it in the mirror" in msg
        with pytest.raises(DataError) as e: fetch_all([direct.name, built.name, "stop/full", "bbq/SES"], progress=False)
        msg = str(e.value)
        assert msg.startswith("2 of 4 data files cannot be used") and msg.count("\n- ") == 2
        assert f"{built.sources[0].path} (source of {built.relpath})" in msg and "fails its checksum" in msg
        assert not (cache/"data"/direct.relpath).exists() and not (cache/"data"/built.relpath).exists()
        assert (cache/"data"/"stop"/"STOP-full.json").is_file() and not list(cache.rglob("*.part"))


@needs_shared
def test_a_source_that_builds_other_bytes_is_refused(tmp_path, monkeypatch, download_mode):
    f = REGISTRY["reference-letters/clg_prompt_settings"]
    src = tmp_path/"mirror"/f.repo/f.commit/f.sources[0].path; src.parent.mkdir(parents=True)
    src.write_bytes(_stand_in_sources(f)[f.sources[0].path].replace(b"Kelly", b"Kelli"))
    monkeypatch.setitem(REGISTRY, f.name, dataclasses.replace(f, sources=(Source(f.sources[0].path, src.stat().st_size, sha(src.read_bytes())),)))
    cache = download_mode("cache")
    monkeypatch.setenv("SILVERSPOON_MIRROR", str(tmp_path/"mirror"))
    with pytest.raises(DataError, match=r"clg_prompt_settings.json: built from generate_clg.py .*the result fails its checksum.*Nothing was saved"):
        fetch(f.name, progress=False)
    assert not (cache/"data"/f.relpath).exists()


def test_one_error_lists_every_file_that_cannot_be_had(tmp_path, monkeypatch, download_mode):
    (tmp_path/"empty").mkdir()
    download_mode("cache")
    monkeypatch.setenv("SILVERSPOON_MIRROR", str(tmp_path/"empty"))
    names = ["stop/full", "silverspoon/human", "bls-oews/national_M2024", "bbq/SES", "stereoset/dev"]
    with pytest.raises(DataError) as e: fetch_all(names, progress=False)
    msg = str(e.value)
    assert msg.startswith(f"3 of 5 data files cannot be used (cache {tmp_path/'cache'/'data'}, downloading from the mirror {tmp_path/'empty'} (SILVERSPOON_MIRROR))")
    for f in map(lookup, names[:3]):
        up = f.source_urls[0] if f.build else f.url
        assert f"download from {(tmp_path/'empty').resolve().as_uri()}/{up[len(PUBLIC_HOST):]}" in msg, f.name
    assert "bbq/" not in msg and "stereoset/" not in msg          # optional, and absent: not an error
    monkeypatch.setenv("SILVERSPOON_DATA", str(tmp_path/"empty"))
    with pytest.raises(DataError) as e: fetch_all(names[:3])
    assert str(e.value).count("\n- ") == 3 and str(e.value).count(": not found at ") == 3


def test_mirror_setting(tmp_path, monkeypatch):
    f = lookup("stop/full")
    monkeypatch.setenv("SILVERSPOON_MIRROR", "https://artifactory.example.edu/raw-github/")
    assert data.mirror_url(f.url) == f"https://artifactory.example.edu/raw-github/{f.repo}/{f.commit}/STOP-full.json"
    monkeypatch.setenv("SILVERSPOON_MIRROR", str(tmp_path/"nowhere"))
    with pytest.raises(DataError, match="SILVERSPOON_MIRROR=.*nowhere.*neither a URL .* nor an existing folder"): data.mirror_url(f.url)


# ---------------------------------------------------------------- the real upstream files

@needs_upstream
@needs_shared
def test_real_sources_build_the_released_files():
    for f in [f for f in REGISTRY.values() if f.build]:
        paths = [UPSTREAM/f.repo/f.commit/s.path for s in f.sources]
        assert [sha(p.read_bytes()) for p in paths] == [s.sha256 for s in f.sources], f.name
        assert data.BUILDERS[f.build](f, paths) == (SHARED/f.relpath).read_bytes(), f.name


def test_silverspoon_run_names_every_missing_file_before_anything_runs(tmp_path):
    from conftest import run_cli
    (tmp_path/"no-data").mkdir()
    r = run_cli("run", "params/normative/gpt4-replay.yaml", "--reports-dir", tmp_path/"reports",
                env={"SILVERSPOON_DATA": str(tmp_path/"no-data"), "SILVERSPOON_STORE": str(tmp_path/"store")})
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and lines[0].startswith("error: 3 of 3 data files cannot be used"), r.stderr
    assert [l.split(":")[0] for l in lines[1:]] == ["- silverspoon/silverSpoonHumanBinary.csv", "- silverspoon/silverSpoonLLMsBinary.csv",
                                                    "- silverspoon/Code/SilverSpoon_Assigned_Topics.csv"], r.stderr
    assert not (tmp_path/"reports").exists() and not (tmp_path/"store").exists()
