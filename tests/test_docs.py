"""The README and the documentation site (issue 33): README.md is the rendering of nbs/index.ipynb, short, with the
command that evaluates a model on its first screen; `tools/docs.py site` (what `make docs` runs) builds a page for every
notebook and guide, every internal link and anchor resolves, and each study notebook's page links the executed notebooks
of its default runs. Nothing is executed; the build takes seconds. Main lane (unmarked): nothing here depends on the stack."""
import html, importlib.util, json, re, subprocess, sys
from pathlib import Path
import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location("docs", ROOT/"tools"/"docs.py")
docs = importlib.util.module_from_spec(spec); spec.loader.exec_module(docs)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")/"_docs"
    r = subprocess.run([sys.executable, str(ROOT/"tools"/"docs.py"), "site", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"tools/docs.py site failed:\n{r.stdout}\n{r.stderr}"
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


def test_readme_generator_keeps_cells_and_drops_directives(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# t\n\ntext"},
                    {"cell_type": "code", "metadata": {}, "source": "#| eval: false\n!pip install x", "outputs": [], "execution_count": None},
                    {"cell_type": "code", "metadata": {}, "source": "#| hide", "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path/"i.ipynb").write_text(json.dumps(nb))
    assert docs.notebook_markdown(tmp_path/"i.ipynb") == "# t\n\ntext\n\n```python\n!pip install x\n```\n"


def test_site_has_a_page_for_every_notebook_and_guide(site):
    want = {p.stem + ".html" for p in [*(ROOT/"nbs").glob("*.ipynb"), *(ROOT/"nbs").glob("guide_*.md")]} | {"notebooks.html"}
    assert {"index.html", "guide_evaluate.html", "guide_inference.html", "guide_security.html", "guide_extending.html",
            "guide_ci.html", "guide_benchmarks.html"} <= want
    have = {p.name for p in site.glob("*.html")}
    assert want <= have, f"pages missing from the site: {sorted(want - have)}"
    for name in want:   # a page with a body, not an empty shell
        assert len(re.sub(r"<[^>]+>", "", (site/name).read_text(encoding="utf-8"))) > 200, f"{name} is (nearly) empty"


def _ids(page:Path)->set[str]: return set(re.findall(r'\sid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_no_broken_internal_link(site):
    broken, checked = [], 0
    for page in site.glob("*.html"):
        for href in re.findall(r'<a\s[^>]*?href="([^"]*)"', page.read_text(encoding="utf-8")):
            href = html.unescape(href)
            if re.match(r"^[a-z][a-z0-9+.-]*:", href): continue
            path, _, anchor = href.partition("#")
            target = site/path if path else page
            checked += 1
            if not target.is_file(): broken.append(f"{page.name}: {href} (no such page)")
            elif anchor and anchor not in _ids(target): broken.append(f"{page.name}: {href} (no such section)")
    assert checked > 100, f"only {checked} internal links: the check would prove nothing"
    assert not broken, "broken internal links:\n" + "\n".join(broken)


def test_links_to_repository_files_name_files_that_exist(site):
    blob = f"{docs.settings()['git_url']}/blob/main/"
    for page in site.glob("*.html"):
        for href in re.findall(r'href="(' + re.escape(blob) + r'[^"#]*)', page.read_text(encoding="utf-8")):
            assert (ROOT/html.unescape(href)[len(blob):]).exists(), f"{page.name}: {href} names a file the repository lacks"


def test_a_link_to_a_missing_file_is_an_error(tmp_path, monkeypatch):
    page = docs.NBS/"guide_x.md"   # resolve_link reads only the page's folder
    assert docs.resolve_link("../reports/index.html", page, {}, "B") == "B/reports/index.html"
    assert docs.resolve_link("guide_security.md#key-variables", page, {(docs.NBS/"guide_security.md").resolve(): "guide_security.html"}, "B") == "guide_security.html#key-variables"
    assert docs.resolve_link("../reports/no-such-report.html", page, {}, "B") is None
    assert docs.resolve_link("https://example.org/x", page, {}, "B") == "https://example.org/x"
    bad = tmp_path/"guide_bad.md"; bad.write_text("# bad\n\n[gone](no-such-report.html)\n")
    monkeypatch.setattr(docs, "pages", lambda: [docs.INDEX, bad])
    assert [b for b in docs.build_site(tmp_path/"out") if "no-such-report.html" in b] == [f"{bad}: no-such-report.html"]


def test_each_study_page_links_its_executed_default_runs(site):
    runs = docs.study_runs()
    assert runs and all(runs.values()), "a study has no executed default-run notebook in reports/"
    for nb, files in runs.items():
        text = (site/f"{nb}.html").read_text(encoding="utf-8")
        for f in files:
            assert f"blob/main/{f.relative_to(ROOT).as_posix()}" in text, f"{nb}.html does not link {f.relative_to(ROOT)}"


@pytest.mark.parametrize("page", ["index", "guide_evaluate", "guide_security", "07b_card", "10_normative", "30_stop"])
def test_site_pages_fit_1400_px_in_chromium(site, page, tmp_path):
    "What a reader sees: the front page, two guides, an API page and two study pages, opened in headless Chromium at 1400 px, are not blank and do not scroll sideways (wide code scrolls inside its block)."
    from test_pages import CHROMIUM, WIDTH, chromium, page_width, not_blank
    if not CHROMIUM.exists(): pytest.skip(f"headless Chromium is not installed ({CHROMIUM})")
    f = tmp_path/f"{page}.html"   # a copy (its style is inline): the measuring copy is written beside it, not into the shared site
    f.write_text((site/f"{page}.html").read_text(encoding="utf-8"), encoding="utf-8")
    png = tmp_path/f"{page}.png"
    chromium(tmp_path/"profile", f"--screenshot={png}", f.resolve().as_uri())
    assert not_blank(png) > 0.01, f"{page}.html: the screenshot at {WIDTH} px is blank"
    scroll, view = page_width(f, tmp_path/"profile2")
    assert scroll <= view, f"{page}.html scrolls sideways at {WIDTH} px: {scroll} px wide"
