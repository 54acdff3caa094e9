"""What a reader sees at 1400 px (issue 22): headless Chromium opens the index, the validity page, the SmolLM2 bias card, the
plan card of the not-run Llama-3-8B example and a study report, in a copy of the committed reports folder whose index, validity
page and plan card `build_index` writes again with this tree's code; each page is photographed (the PNG must not be blank) and
must not scroll sideways (`document.documentElement.scrollWidth` <= 1400). The bias card and the study report are the committed
pages (tests/test_reports.py checks they come from this tree): writing the card again cost ~220 s on 2 cores, for a page that
`make reports` writes and that the card tests check by content."""
import re, shutil, subprocess
from pathlib import Path
import pytest
from conftest import ROOT
from silverspoon.site.runner import build_index; from silverspoon.run.executor import html_page

CHROMIUM = Path("/usr/bin/chromium")
WIDTH = 1400
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"headless Chromium is not installed ({CHROMIUM}, Debian package "
                                                               "`chromium`): the 1400 px page checks need a browser")
REPORT = ("downstream", "smollm2-135m-stop-lora")   # the widest report before the pages were made to fit (4148 px)
MEASURE = ("<script>addEventListener('load', () => document.body.setAttribute('data-width', "
           "document.documentElement.scrollWidth + ' ' + window.innerWidth));</script>")

def chromium(profile:Path, *args)->str:
    "Run headless Chromium at 1400 px with its own profile folder (several may run at once); its stdout."
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
           f"--window-size={WIDTH},1000", "--virtual-time-budget=5000", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stderr[-2000:]}"
    return r.stdout

def page_width(page:Path, profile:Path)->tuple[int, int]:
    "The page's (scrollWidth, viewport width) in Chromium: a copy of it beside it, with a script that writes them into the DOM."
    copy = page.with_name(page.stem + ".measure.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    m = re.search(r'data-width="(\d+) (\d+)"', chromium(profile, "--dump-dom", copy.resolve().as_uri()))
    assert m, f"{page}: Chromium's DOM has no data-width attribute: the measuring script did not run"
    return int(m.group(1)), int(m.group(2))

def not_blank(png:Path)->float:
    "The share of the screenshot's pixels that are not white."
    from PIL import Image
    import numpy as np
    return float((np.asarray(Image.open(png).convert("L")) < 250).mean())

@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    "A copy of the committed reports folder (runs, study reports, bias cards) whose index, validity page and plan cards this tree's `build_index` writes again."
    d = tmp_path_factory.mktemp("pages")/"reports"
    shutil.copytree(ROOT/"reports", d)
    written = {p: (d/p).stat().st_mtime_ns for p in ("index.html", "validity.html")}
    (d/"models"/"llama3-8b-instruct.html").unlink()   # a plan card: build_index must write it again
    build_index(d)
    assert all((d/p).stat().st_mtime_ns != t for p, t in written.items()) and (d/"models"/"llama3-8b-instruct.html").is_file()
    return d

def test_the_measure_sees_a_page_that_scrolls_sideways(tmp_path):
    "The check can fail: a 2000 px wide block outside any table makes the page scroll."
    p = tmp_path/"wide.html"
    p.write_text(html_page("wide", "<div style='width:2000px'>x</div>"))
    width, viewport = page_width(p, tmp_path/"profile")
    assert viewport == WIDTH and width > WIDTH

@pytest.mark.parametrize("page", ["index.html", "validity.html", "models/smollm2-135m.html", "models/llama3-8b-instruct.html", "/".join(REPORT) + ".html"])
def test_page_fits_1400_px(reports, page, tmp_path):
    p = reports/page
    width, viewport = page_width(p, tmp_path/"profile")
    assert viewport == WIDTH, f"Chromium's window is {viewport} px wide, not {WIDTH}"
    assert width <= WIDTH, f"{page} is {width} px wide at {WIDTH} px: a table or a long word does not fit (see fit_tables and _CSS in nbs/07a_runner.ipynb)"
    png = tmp_path/(p.stem + ".png")
    chromium(tmp_path/"profile", f"--screenshot={png}", p.resolve().as_uri())
    assert png.exists() and not_blank(png) > 0.02, f"{png}: the screenshot of {page} is blank"

def test_the_report_opens_with_its_verdict_then_its_instruments(reports):
    text = (reports/"/".join(REPORT)).with_suffix(".html").read_text()
    run_line, verdict, instruments = text.find("<strong>Run</strong>"), text.find("<h3>Verdict</h3>"), text.find("<h3>Instruments")
    assert 0 <= run_line < verdict < instruments, (run_line, verdict, instruments)
    assert "answer rate change, BBQ (adapter - base)" in text[verdict:instruments] and "MDE (80% power)" in text[verdict:instruments]

TABLE_MEASURE = ("<script>addEventListener('load', () => document.body.setAttribute('data-tables', JSON.stringify("
                 "[...document.querySelectorAll(SELECTOR)].map(t => [t.scrollWidth, t.parentElement.clientWidth, t.rows.length]))));</script>")

def table_widths(page:Path, selector:str, profile:Path)->list[list[int]]:
    "Per table matching `selector`: [its scrollWidth, its box's width, its rows], measured in Chromium at 1400 px."
    import json
    copy = page.with_name(page.stem + ".tables.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", TABLE_MEASURE.replace("SELECTOR", repr(selector)) + "</body>"), encoding="utf-8")
    m = re.search(r"data-tables=\"([^\"]*)\"", chromium(profile, "--dump-dom", copy.resolve().as_uri()))
    assert m, f"{page}: the measuring script did not run"
    import html as _html
    return json.loads(_html.unescape(m.group(1)))

def test_the_index_and_card_tables_show_every_column_at_1400_px(reports, tmp_path):
    """Issue 56 (item 6): the index's models x studies table and the card's headline table fit their page at 1400 px, no
    sideways scrolling inside their box either; a card row is one line per headline (its prose folded in <details>),
    with a forest plot above, 'verdicts given' only where a headline has a verdict, and no 'nan' anywhere."""
    import pandas as pd
    from silverspoon.site.card import card_html
    [[w, box, rows]] = table_widths(reports/"index.html", "table.models", tmp_path/"p1")
    assert rows > 5 and w <= box, f"the index's models x studies table is {w} px wide in a {box} px box: a column is cut off"
    card = pd.read_csv(ROOT/"reports"/"models"/"smollm2-135m"/"bias_card.csv")   # the committed card's data, this tree's layout
    page = tmp_path/"card.html"; page.write_text(html_page("card", card_html(card, "smollm2-135m")), encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    [[w, box, rows]] = table_widths(page, "table.card.fit", tmp_path/"p2")
    assert rows == len(card) + 1 and w <= box, f"the card's headline table is {w} px wide in a {box} px box"
    assert "<figure class='forest'><svg" in text and text.count("<details><summary><b>") == len(card)
    assert ">nan<" not in text.lower() and " nan " not in text.lower()
    answers = text[text.index("Did the model answer?"):text.index("<h2>Headlines")]
    real = card.verdict.astype(str).str.startswith(("evidence", "no evidence", "underpowered"))
    for study, g in card.groupby("study"):
        row = answers[answers.index(f"<td>{study}</td>"):][:2000].split("</tr>")[0]
        assert ("verdicts given" in row) == bool(real[g.index].any()), f"{study}: 'verdicts given' where no headline has a verdict, or missing where one has"
