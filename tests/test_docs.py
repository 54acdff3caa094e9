"""The README and the documentation site (issues 33, 56): README.md is the rendering of nbs/index.ipynb, short, with the
command that evaluates a model on its first screen, which starts from a model file that runs on a CPU without a token.
The site is built by MkDocs (mkdocs.yml, its hooks in tools/docs.py): here from a subset (every guide, the index, the API
reference and one notebook, 02a_replay, executed; `make docs` builds and executes every notebook), in a temporary
folder; the test asserts the sidebar's reading order, the search index, the API anchors and parameter tables, an
executed example's output, highlighted code, that no internal link is broken, and the pages at 1400 px in Chromium.
It needs requirements-docs.txt (`make install-docs`, which the main pytest lane depends on): without it the build tests
skip, except under CI, where they fail. The build takes ~30-50 s on 2 cores (most of it the API pages: `show_doc` for
~1,150 names), the rest seconds. Main lane (unmarked): nothing here depends on the stack."""
import html, importlib.util, json, os, re, subprocess, sys
from pathlib import Path
import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location("docs", ROOT/"tools"/"docs.py")
docs = importlib.util.module_from_spec(spec); spec.loader.exec_module(docs)
EXAMPLE = "02a_replay"   # a small library notebook whose examples print what they return


def _have_mkdocs()->bool:
    return subprocess.run([sys.executable, "-c", "import mkdocs, material, mkdocs_jupyter"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not _have_mkdocs():
        if os.environ.get("CI"): pytest.fail("the docs packages are not installed: `make install-docs` (requirements-docs.txt)")
        pytest.skip("the docs packages are not installed: `make install-docs` (requirements-docs.txt)")
    out = tmp_path_factory.mktemp("site")/"_docs"
    env = {**os.environ, "SILVERSPOON_DOCS_PAGES": EXAMPLE, "SILVERSPOON_DOCS_EXECUTE": EXAMPLE, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-f", str(ROOT/"mkdocs.yml"), "--site-dir", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, f"mkdocs build failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return out


def test_readme_is_the_rendering_of_the_index():
    assert (ROOT/"README.md").read_text(encoding="utf-8") == docs.readme_text(), \
        "README.md differs from nbs/index.ipynb's rendering: edit the notebook, then `make readme`"
    r = subprocess.run([sys.executable, str(ROOT/"tools"/"docs.py"), "readme", "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_readme_is_short_and_evaluating_a_model_is_on_the_first_screen():
    text = (ROOT/"README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= docs.README_LIMIT_BYTES, f"README.md is {len(text.encode())} bytes"
    first_screen = "\n".join(text.splitlines()[:30])
    assert "silverspoon run --model params/models/" in first_screen, "the command that evaluates a model left the README's first 30 lines"
    assert "reports/models/" in first_screen, "where the bias card is written left the README's first 30 lines"
    for cmd in ("make reports", "bash .ci/run"):   # the two commands, as CI runs them (.ci/run calls make install, test, test-colab)
        assert cmd in text
    ci = (ROOT/".ci"/"run").read_text(encoding="utf-8")
    assert all(f"\nmake {t}" in ci for t in ("install", "test", "test-colab")), ".ci/run no longer runs what the README says"


def test_readme_starts_from_a_cpu_model_and_holds_at_most_three_timings():
    "Issue 56: the first model file a newcomer copies runs on a CPU without a token (a GGUF in a pip package), the GPU file comes after it; timings live in the CHANGELOG and guides."
    text = (ROOT/"README.md").read_text(encoding="utf-8")
    section = text[text.index("## Evaluate your model"):text.index("\n## ", text.index("## Evaluate your model") + 5)]
    copies = re.findall(r"^cp (params/models/\S+\.yaml)", section, flags=re.M)
    assert copies and copies[0] == "params/models/smollm2-135m.yaml", f"the first model file copied is {copies[:1]}"
    first = (ROOT/copies[0]).read_text(encoding="utf-8")
    assert "gguf_file:" in first and "device: cuda" not in first and "gated" not in first, f"{copies[0]} does not run on a CPU without a token"
    assert "params/models/llama3-8b-instruct.yaml" in copies, "the GPU model file is no longer shown after the CPU one"
    timings = re.findall(r"\b\d+(?:\.\d+)?\s?(?:s|min|h|ms|seconds|minutes)\b", re.sub(r"```.*?```", "", text, flags=re.S))
    assert len(timings) <= 3, f"the README holds {len(timings)} timing figures (at most 3; the rest in CHANGELOG.md / nbs/guide_ci.md): {timings}"


def test_readme_generator_keeps_cells_and_drops_directives(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# t\n\ntext"},
                    {"cell_type": "code", "metadata": {}, "source": "#| eval: false\n!pip install x", "outputs": [], "execution_count": None},
                    {"cell_type": "code", "metadata": {}, "source": "#| hide", "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path/"i.ipynb").write_text(json.dumps(nb))
    assert docs.notebook_markdown(tmp_path/"i.ipynb") == "# t\n\ntext\n\n```python\n!pip install x\n```\n"


def test_docs_tool_writes_no_html():
    "Issue 56: tools/docs.py does what no tool does (README, execution with nbdev's rules, links, API markdown); the HTML is MkDocs'."
    src = (ROOT/"tools"/"docs.py").read_text(encoding="utf-8")
    assert not re.search(r"<(html|body|nav|pre|h[1-6])\b", src), "tools/docs.py writes HTML again"
    assert "tools/docs.py" in (ROOT/"mkdocs.yml").read_text(encoding="utf-8"), "mkdocs.yml no longer runs the hooks"


def test_site_has_every_guide_the_index_the_example_and_the_api_pages_in_reading_order(site):
    want = {"index.html", f"{EXAMPLE}.html", "api/index.html", "api/site.runner.html", "api/instruments.parse.html"} | \
           {p.stem + ".html" for p in (ROOT/"nbs").glob("guide_*.md")}
    have = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert want <= have, f"pages missing from the site: {sorted(want - have)}"
    for name in want:   # a page with a body, not an empty shell
        assert len(re.sub(r"<[^>]+>", "", (site/name).read_text(encoding="utf-8"))) > 500, f"{name} is (nearly) empty"
    text = (site/"guide_ci.html").read_text(encoding="utf-8")
    nav = text[text.index("md-nav--primary"):text.index('class="md-content"')]   # Material's sidebar
    order = [nav.find(s) for s in ('href="index.html"', "Evaluate your model", "Studies", "Policy", "Security", "Development",
                                   "Library", f'href="{EXAMPLE}.html"', "API reference", 'href="api/site.runner.html"')]
    assert all(i > 0 for i in order) and order == sorted(order), f"the sidebar is not in reading order: {order}"


def test_search_index_holds_pages_and_api_entries(site):
    idx = json.loads((site/"search"/"search_index.json").read_text(encoding="utf-8"))
    locations = {d["location"] for d in idx["docs"]}
    for loc in ("index.html", "guide_evaluate.html", "api/site.runner.html#verify_provenance", "api/instruments.parse.html#replygate",
                "api/studies.silverspoon.normative.html#parse_normative"):
        assert loc in locations, f"the search index has no entry {loc}"
    assert any("verify_provenance" in d["title"] for d in idx["docs"])


@pytest.mark.parametrize("page,anchor,param", [("api/site.runner.html", "verify_provenance", None),
                                               ("api/instruments.parse.html", "replygate", None),
                                               ("api/studies.silverspoon.normative.html", "parse_normative", None)])
def test_api_reference_has_anchored_signatures_and_parameter_tables(site, page, anchor, param):
    text = (site/page).read_text(encoding="utf-8")
    i = text.find(f'id="{anchor}"')
    assert i > 0, f"{page} has no anchor #{anchor}"
    block = text[i:text.find("<h3", i + 10) if "<h3" in text[i + 10:] else len(text)]
    assert 'class="highlight' in block, f"{page}#{anchor}: no highlighted signature"
    assert "<table>" in block and "Details" in block, f"{page}#{anchor}: no docments parameter table"


def test_example_page_shows_executed_outputs_and_highlighted_code(site):
    text = (site/f"{EXAMPLE}.html").read_text(encoding="utf-8")
    assert "answers_sha" in html.unescape(text), f"{EXAMPLE}.html shows no output of its examples (was it executed?)"
    assert "Generation(text=" in html.unescape(text)
    assert re.search(r'<span class="[a-z]{1,3}">', text), f"{EXAMPLE}.html has no highlighted code"
    assert "#| export" not in text and "#| hide" not in text, "nbdev directives leaked into the page"


def test_no_broken_internal_link(site):
    broken, checked = [], 0
    for page in site.rglob("*.html"):
        if page.name == "404.html": continue   # its links are absolute, for the published site (site_url)
        for href in re.findall(r'<a\s[^>]*?href="([^"]*)"', page.read_text(encoding="utf-8")):
            href = html.unescape(href)
            if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("#") or not href: continue
            path = href.partition("#")[0]
            checked += 1
            target = (page.parent/path)
            if not (target.is_file() or (target/"index.html").is_file()): broken.append(f"{page.relative_to(site)}: {href}")
    assert checked > 100, f"only {checked} internal links: the check would prove nothing"
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken))[:40])


def test_links_to_repository_files_name_files_that_exist(site):
    blob = f"{docs.settings()['git_url']}/blob/main/"
    n = 0
    for page in site.rglob("*.html"):
        for href in re.findall(r'href="(' + re.escape(blob) + r'[^"#]*)', page.read_text(encoding="utf-8")):
            n += 1
            assert (ROOT/html.unescape(href)[len(blob):]).exists(), f"{page.name}: {href} names a file the repository lacks"
    assert n > 10


def test_a_link_to_a_missing_file_is_an_error():
    page = docs.NBS/"guide_x.md"   # resolve_link reads only the page's folder
    assert docs.resolve_link("../reports/index.html", page, {}, "B") == "B/reports/index.html"
    assert docs.resolve_link("guide_security.md#key-variables", page, {(docs.NBS/"guide_security.md").resolve(): "guide_security.html"}, "B") == "guide_security.html#key-variables"
    assert docs.resolve_link("../reports/no-such-report.html", page, {}, "B") is None
    assert docs.resolve_link("https://example.org/x", page, {}, "B") == "https://example.org/x"
    broken = []
    out = docs.links_rewritten("[ok](../reports/index.html) [gone](no-such-report.html) <img src=\"../README.md\">", page, {}, "B", broken)
    assert out == "[ok](B/reports/index.html) [gone](no-such-report.html) <img src=\"B/README.md\">"
    assert broken == ["nbs/guide_x.md: no-such-report.html"]


def test_each_study_page_links_its_executed_default_runs():
    "The study notebooks' pages end with their default runs' executed notebooks (reports/<study>/<run>.ipynb)."
    runs = docs.study_runs()
    assert runs and all(runs.values()), "a study has no executed default-run notebook in reports/"
    for nb, files in runs.items():
        src = docs.NBS/f"{nb}.ipynb"
        page = docs.prepared_notebook(src, src, {}, "B", [], files)
        last = "".join(page["cells"][-1]["source"])
        for f in files:
            assert f"B/{f.relative_to(ROOT).as_posix()}" in last, f"{nb}'s page does not link {f.relative_to(ROOT)}"


def test_prepared_page_follows_nbdev_conventions(tmp_path):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "#| hide\nimport x", "outputs": [], "execution_count": None},
                    {"cell_type": "code", "metadata": {}, "source": "#| export\ndef f(): pass", "outputs": [], "execution_count": None},
                    {"cell_type": "code", "metadata": {}, "source": "#| include: false\ny = 1", "outputs": [], "execution_count": None},
                    {"cell_type": "markdown", "metadata": {}, "source": "see [a](guide_ci.md)"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    f = tmp_path/"n.ipynb"; f.write_text(json.dumps(nb))
    page = docs.prepared_notebook(docs.NBS/"n.ipynb", f, {(docs.NBS/"guide_ci.md").resolve(): "guide_ci.html"}, "B", [], None)
    assert [c["source"] for c in page["cells"]] == ["def f(): pass", "see [a](guide_ci.html)"]


def test_execution_is_cached_by_notebook_content(tmp_path, monkeypatch):
    "A notebook runs once per content: its outputs are kept, the same content is not executed again, a changed one is."
    monkeypatch.setattr(docs, "EXECUTED", tmp_path/"cache")
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "6*7", "outputs": [], "execution_count": None},
                    {"cell_type": "code", "metadata": {}, "source": "#| eval: false\nraise SystemExit('never run')", "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    f = tmp_path/"t.ipynb"; f.write_text(json.dumps(nb))
    real_run, calls = subprocess.run, []
    def counting_run(cmd, **kw): calls.append(cmd); return real_run(cmd, **kw, env={**os.environ, "PYTHONPATH": str(ROOT)})
    monkeypatch.setattr(docs.subprocess, "run", counting_run)
    monkeypatch.setattr(docs, "executed_path", lambda p: tmp_path/"cache"/f"{p.stem}-{docs.notebook_key(p)}.ipynb")
    assert docs.execute_all([f]) == [] and len(calls) == 1
    out = json.loads(docs.executed_path(f).read_text())
    assert out["cells"][0]["outputs"][0]["data"]["text/plain"] in (["42"], "42") and out["cells"][1]["outputs"] == []
    assert docs.execute_all([f]) == [] and len(calls) == 1, "an unchanged notebook was executed again"
    nb["cells"][0]["source"] = "6*8"; f.write_text(json.dumps(nb))
    assert docs.execute_all([f]) == [] and len(calls) == 2, "a changed notebook was not executed again"


@pytest.mark.parametrize("page", ["index", "guide_evaluate", "guide_security", EXAMPLE, "api/site.runner"])
def test_site_pages_fit_1400_px_in_chromium(site, page, tmp_path):
    "What a reader sees: the front page, two guides, a notebook and an API page, opened in headless Chromium at 1400 px, are not blank and do not scroll sideways (wide code scrolls inside its block)."
    from test_pages import CHROMIUM, WIDTH, chromium, page_width, not_blank
    if not CHROMIUM.exists(): pytest.skip(f"headless Chromium is not installed ({CHROMIUM})")
    f = site/f"{page}.html"
    png = tmp_path/f"{Path(page).name}.png"
    chromium(tmp_path/"profile", f"--screenshot={png}", f.resolve().as_uri())
    assert not_blank(png) > 0.01, f"{page}.html: the screenshot at {WIDTH} px is blank"
    scroll, view = page_width(f, tmp_path/"profile2")
    assert scroll <= view, f"{page}.html scrolls sideways at {WIDTH} px: {scroll} px wide"


def test_guide_lists_the_model_fields_of_every_backend():
    "nbs/guide_running.md's table of `model:` fields names, in each backend's row, every field that backend's settings class declares, and no field it does not (issue 53)."
    import dataclasses
    from silverspoon.core import BACKENDS, model_settings
    text = (ROOT/"nbs"/"guide_running.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|[^|]*\|([^\n]*)\|$", text, re.M)}
    assert set(rows) == set(BACKENDS), rows.keys()
    every = {f.name for b in BACKENDS for f in dataclasses.fields(model_settings(b))}
    for b in BACKENDS:
        declared = {f.name for f in dataclasses.fields(model_settings(b))} - {"backend", "id"}
        named = set(re.findall(r"`(\w+)`", rows[b])) & every
        assert named == declared, (b, named ^ declared)
