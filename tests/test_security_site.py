"""Attacks on what the site publishes (red-team round 3, issue 31): a full disk while the index or a card is written leaves the
old page whole (atomic writes), and a model id with TeX in it is drawn literally in every figure."""
import re, sys, shutil, hashlib, subprocess, textwrap
from pathlib import Path
import pytest
from conftest import ROOT


# ----------------------------------------------------------------------------------------------------
# A full disk while a page is written (was tests/test_security_round3_atomic.py)
resource = pytest.importorskip("resource")


def _sha(p:Path)->str: return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    "A small reports folder (two committed normative runs) with its index and the SmolLM2 card written once: the old pages."
    from silverspoon.site.runner import build_index, write_card
    d = tmp_path_factory.mktemp("atomic")/"reports"
    for run in ("smollm2-135m", "gpt4-replay"):
        shutil.copytree(ROOT/"reports"/"normative"/run, d/"normative"/run)
        shutil.copy(ROOT/"reports"/"normative"/f"{run}.ipynb", d/"normative")   # it shows provenance.json's digest: the card trusts the record only with it
    build_index(d); write_card("smollm2-135m", d)
    return d


def _with_file_limit(code:str, limit:int, cwd:Path)->subprocess.CompletedProcess:
    "Run `code` in a child Python whose files cannot grow past `limit` bytes (a disk that fills at that size)."
    pre = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # past the limit a write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    """)
    return subprocess.run([sys.executable, "-c", pre + code], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_full_disk_during_index_leaves_the_old_index_whole(reports):
    index, validity = reports/"index.html", reports/"validity.html"
    before = _sha(index)
    assert validity.stat().st_size < 20_000 < index.stat().st_size, "the limit must fall between the validity page and the index"
    r = _with_file_limit(f"from silverspoon.site.cli import main; raise SystemExit(main(['index', '--reports-dir', {str(reports)!r}]))", 20_000, ROOT)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "File too large" in r.stdout + r.stderr          # the write failed, and said why
    assert _sha(index) == before                            # the old index, byte for byte (in place it would be cut at 20,000 bytes)
    assert not list(reports.glob(".*.tmp-*"))               # and no temporary left beside it
    r = subprocess.run([sys.executable, "-c", f"from silverspoon.site.cli import main; raise SystemExit(main(['index', '--reports-dir', {str(reports)!r}]))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr             # with room again, the index is rebuilt
    assert index.stat().st_size > 20_000 and index.read_text(encoding="utf-8").rstrip().endswith("</html>")


def test_a_full_disk_while_writing_a_card_leaves_the_old_card_whole(reports):
    page, csv = reports/"models"/"smollm2-135m.html", reports/"models"/"smollm2-135m"/"bias_card.csv"
    before = _sha(page)
    assert csv.stat().st_size < 8_000 < page.stat().st_size
    code = f"from silverspoon.site.runner import write_card; write_card('smollm2-135m', {str(reports)!r})"
    r = _with_file_limit(code, 8_000, ROOT)
    assert r.returncode != 0 and "File too large" in r.stderr, r.stdout + r.stderr
    assert _sha(page) == before
    assert not list((reports/"models").rglob(".*.tmp-*"))


# ----------------------------------------------------------------------------------------------------
# A model id with TeX in it: figures draw it as written (was tests/test_security_round3_http2.py, lines 180-227)
TEX_IDS = ["org/mo$del$", r"org/$\bad$", r"org/$x^{$"]


def _drawn_titles(fig):
    import io
    fig.savefig(io.BytesIO(), format="png")                      # where a mathtext parse error used to stop the run
    return [t.get_text() for ax in fig.axes for t in (ax.title,) if t.get_text()]


@pytest.mark.parametrize("model_id", TEX_IDS)
def test_a_model_id_with_tex_draws_the_study_figures(model_id):
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    import pandas as pd
    from silverspoon.studies.silverspoon.normative import topic_figure
    from silverspoon.studies.stop.stop import heatmap_figure, first_no_figure, SEVERITIES
    items = pd.DataFrame(dict(topic=[0, 0, 1, 1], parser=[0, 1, 1, None], low=[0, 1, 1, 0], up=[1, 1, 0, 0]))
    fig = topic_figure(items, "parser", f"{model_id} (parser)")
    assert _drawn_titles(fig)[0] == model_id.replace("$", r"\$") + "\n(parser)"; plt.close(fig)
    conv = pd.DataFrame([dict(status="scored", severity=s, demographic=d, score=0.4, first_no=f)
                         for s in SEVERITIES for d, f in (("age", "1"), ("race", "never"))])
    for draw in (heatmap_figure, first_no_figure):
        fig = draw(conv, f"{model_id}: mean sensitivity")
        assert _drawn_titles(fig) == [model_id.replace("$", r"\$") + ": mean sensitivity"]; plt.close(fig)


@pytest.mark.parametrize("model_id", ["org/mo$del$", r"org/$\bad$"])
def test_a_model_id_with_tex_draws_the_index_forest_plot(model_id):
    "The index's forest plot (`runner.forest_figure`) puts run and model names on its axis: drawn as written, never as TeX."
    import pandas as pd
    from silverspoon.site.runner import forest_figure, figure_data_uri
    rows = pd.DataFrame(dict(run=[f"{model_id}-run", "other"], model=[model_id, "other"], metric="m", estimate=[0.2, 0.5], ci_low=[0.1, 0.4], ci_high=[0.3, 0.6]))
    fig = forest_figure(rows, "m", f"normative: {model_id}")
    assert figure_data_uri(fig).startswith("data:image/png;base64,")   # drawing it raised a mathtext error before
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert model_id.replace("$", r"\$") in labels


def test_report_figure_draws_any_unparsable_text_literally(tmp_path):
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    from silverspoon.core import load_params
    from silverspoon.studies.report import Report
    rep = Report(load_params(dict(study="toy", run="x", model=dict(backend="scripted", id=r"org/$\bad$"))), tmp_path)
    fig, ax = plt.subplots(); ax.set_title(r"org/$\bad$: a title built without literal_text"); ax.set_xlabel(r"$\alpha$")
    rep.figure(fig, "tex", "a figure")
    assert (tmp_path/"tex.png").stat().st_size > 0 and "tex.png" in rep.written
    assert ax.get_title() == r"org/\$\bad\$: a title built without literal_text" and ax.get_xlabel() == r"$\alpha$"


# ----------------------------------------------------------------------------------------------------
# A rejected reply shown in the report (issue 51 B09): a backtick closed its Markdown code span and the rest became a live
# remote image (a tracking pixel on every view) and a link. Replies are now escaped HTML inside <code>, never Markdown.
HOSTILE_REPLIES = ["ok` ![p](http://attacker.invalid/pixel.png) [click](http://attacker.invalid/go) `",
                   "`` ![p](https://attacker.invalid/a.png) <img src=http://attacker.invalid/b.png> <a href='http://attacker.invalid/c'>x</a>",
                   "line\n\n![p](http://attacker.invalid/d.png)\n\n[l]: http://attacker.invalid/e"]


def test_a_rejected_reply_cannot_put_an_image_or_link_on_the_published_page(tmp_path, monkeypatch):
    import re, nbformat, pandas as pd, IPython.display
    from silverspoon.core import load_params
    from silverspoon.studies.report import Report
    from silverspoon.instruments.parse import ReplyGate
    from silverspoon.run.executor import notebook_html
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    rep = Report(load_params(dict(study="normative", run="hostile", model=dict(backend="scripted", id="text:x"))), tmp_path)
    replies = HOSTILE_REPLIES*2
    gate = ReplyGate(checks=())
    parsed = pd.DataFrame(dict(status="not_an_answer", value=None, rule="not an answer"), index=range(len(replies)))
    rep.answers(parsed, gate.screen(replies), replies=replies, gate=gate)
    outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": o.data} if isinstance(o, IPython.display.Markdown) else {"text/html": o.data})
               for o in shown if isinstance(o, (IPython.display.Markdown, IPython.display.HTML))]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("rep.answers(...)", outputs=outputs)])
    page = notebook_html(nb)
    assert "Replies that are not answers" in page
    assert "attacker.invalid" in page                                          # the replies are shown ...
    assert not re.search(r"<img[^>]*attacker", page), page                     # ... as text: no remote image
    assert not re.search(r"<a\b[^>]*href[^>]*attacker", page), page            # and no link
    assert not re.search(r"<(img|a|script)\b", page.split("Replies that are not answers")[1])


# ----------------------------------------------------------------------------------------------------
# A publish killed between its steps (issue 51, round 3's A24): after a kill -9 mid-publish the index showed the run's new
# summary.csv beside its old HTML page. The summary now goes last; the next run of that name completes or undoes the rest.
class _Killed(BaseException): "Stands in for a kill -9: nothing after it runs."


def _finished_run(tmp:Path, version:int):
    "What a run leaves in its temporary folder before `_publish`: its folder (CSVs, summary.csv), HTML page and notebook."
    (tmp/"r").mkdir(parents=True)
    (tmp/"r"/"items.csv").write_text(f"item,v\n1,{version}\n")
    (tmp/"r"/"summary.csv").write_text(f"run,metric,estimate\nr,m,{version}\n")
    (tmp/"r.html").write_text(f"<p>version {version}</p>")
    (tmp/"r.ipynb").write_text(f'{{"version": {version}}}')


def _shown(study_dir:Path):
    "(the version of the summary the index would list, the version of the page it links): None for the summary when no summary.csv is published."
    import pandas as pd
    from silverspoon.site.runner import collect_summaries
    s = collect_summaries(study_dir.parent).get(study_dir.name)
    page = (study_dir/"r.html").read_text()
    return (int(s.estimate.iloc[0]) if s is not None else None), int(page.split()[-1].removesuffix("</p>"))


@pytest.mark.parametrize("kill_at", range(1, 7))
def test_a_publish_killed_at_any_step_never_shows_the_new_summary_with_the_old_page(tmp_path, monkeypatch, kill_at):
    import os, tempfile
    from silverspoon.run import executor as runner
    study_dir = tmp_path/"reports"/"normative"; study_dir.mkdir(parents=True)
    first = Path(tempfile.mkdtemp(prefix=".r.partial-", dir=study_dir)); _finished_run(first, 1)
    runner._publish(first, study_dir, "r"); shutil.rmtree(first)
    assert _shown(study_dir) == (1, 1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"]); dead.wait()    # the pid of a process that is gone: the killed run's
    second = Path(tempfile.mkdtemp(prefix=f".r.partial-{dead.pid}-", dir=study_dir)); _finished_run(second, 2)
    real, calls, pid = os.replace, [], os.getpid
    monkeypatch.setattr(runner.os, "getpid", lambda: dead.pid)             # the publishing process is the one killed
    def replace(a, b):
        calls.append(a)
        if len(calls) == kill_at: raise _Killed()
        return real(a, b)
    monkeypatch.setattr(runner.os, "replace", replace)
    try: runner._publish(second, study_dir, "r")
    except _Killed: pass
    monkeypatch.setattr(runner.os, "replace", real); monkeypatch.setattr(runner.os, "getpid", pid)
    summary, page = _shown(study_dir)
    assert summary in (None, page), f"killed at step {kill_at}: the index lists summary {summary} beside page {page}"
    runner._remove_abandoned(study_dir, "r")                                # what the next run of r does first
    summary, page = _shown(study_dir)
    assert summary == page and (study_dir/"r"/"items.csv").read_text().endswith(f",{page}\n"), (kill_at, summary, page)
    assert not list(study_dir.glob(".r.*"))


# ----------------------------------------------------------------------------------------------------
# A full disk (issue 51, round 3's A23): the error named no file. It names the file being written and says what to do.
def test_a_full_disk_names_the_file_being_written_and_the_fix(reports, cli, monkeypatch):
    import errno, os
    def full(fd): raise OSError(errno.ENOSPC, "No space left on device")   # the disk fills while a page is written
    monkeypatch.setattr(os, "fsync", full)
    r = cli("index", "--reports-dir", reports)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line, = r.stderr.strip().splitlines()                                  # one line
    assert re.match(rf"error: {re.escape(str(reports))}/\S+\.html: No space left on device\. Fix: free space on the disk that holds it", line), line


def test_a_full_disk_inside_a_run_names_the_table_being_written(tmp_path, monkeypatch):
    "The run's failure line quotes the notebook's error: a CSV the report could not write is named in it."
    import errno, pandas as pd
    from silverspoon.core import load_params
    from silverspoon.studies.report import Report
    rep = Report(load_params(dict(study="normative", run="x", model=dict(backend="scripted", id="text:x"))), tmp_path)
    def full(self, *a, **kw): raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    with pytest.raises(OSError) as e: rep.items(pd.DataFrame({"item": [1, 2], "y": [0, 1]}))
    assert e.value.filename == str(tmp_path/"items.csv") and str(tmp_path/"items.csv") in str(e.value) and e.value.errno == errno.ENOSPC


# Issue 51 B02: a key pasted into a model file is never published (plan cards included); `index` refuses the file as
# `check` does and builds the index for the other model files.
KEY = "sk-proj-Zq81LmX0vT4pKs9WbN2yHc7RdJ5eFgA3uQ6iOo"   # not a real key: the shape of one
LOGIN = "alice:hunter2-s3cret-pw"


@pytest.fixture
def leaky_project(tmp_path):
    "A copy of params/ (with two model files holding a secret) and one committed normative run; a plan card an earlier version wrote with the key in it."
    t = tmp_path/"project"
    shutil.copytree(ROOT/"params", t/"params"); (t/"settings.ini").write_text((ROOT/"settings.ini").read_text())
    (t/"params"/"models"/"leak.yaml").write_text(f'name: leak\nmodel: {{backend: openai, id: gpt-4o, api_key_env: "{KEY}"}}\n')
    (t/"params"/"models"/"login.yaml").write_text(f'name: login\nmodel: {{backend: openai, id: gpt-4o, base_url: "https://{LOGIN}@api.example.com/v1"}}\n')
    shutil.copytree(ROOT/"reports"/"normative"/"smollm2-135m", t/"reports"/"normative"/"smollm2-135m")
    (t/"reports"/"models").mkdir(parents=True); (t/"reports"/"models"/"leak.html").write_text(f"<td>api_key_env</td><td><code>{KEY}</code></td>")
    return t


def test_pasted_key_in_a_model_file_is_published_nowhere(leaky_project, cli):
    env = {"SILVERSPOON_ROOT": str(leaky_project), "SILVERSPOON_STORE": str(leaky_project/"store")}
    checked = cli("check", leaky_project/"params"/"models"/"leak.yaml", env=env)
    assert checked.returncode == 2 and "field `model.api_key_env` must be the NAME" in checked.stderr and KEY not in checked.stderr + checked.stdout
    unrelated = leaky_project/"mine.yaml"   # an unrelated run, which rebuilds the index at its end: refused before anything runs
    unrelated.write_text("study: normative\nmodel: {backend: scripted, id: 'text:P1'}\nsample: {n: 6}\n")
    before = sorted(str(f) for f in (leaky_project/"reports").rglob("*"))
    ran = cli("run", unrelated, "--reports-dir", leaky_project/"reports", env=env)
    assert ran.returncode == 2 and "field `model.api_key_env` must be the NAME" in ran.stderr and KEY not in ran.stderr + ran.stdout
    assert sorted(str(f) for f in (leaky_project/"reports").rglob("*")) == before
    r = cli("index", "--reports-dir", leaky_project/"reports", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert checked.stderr.strip().rstrip(".") in r.stderr                   # the message `check` gives, word for word
    assert "The index was written without it" in r.stderr and "1 more model file(s) refused" in r.stderr
    reports = leaky_project/"reports"
    index = (reports/"index.html").read_text()
    assert "smollm2-135m" in index and "llama3-8b-instruct" in index       # the other model files' rows and plan cards are built
    assert "must be the NAME" in (reports/"models"/"leak.html").read_text()   # the error instead of a card (the old plan card replaced)
    assert "must not carry credentials" in (reports/"models"/"login.html").read_text()
    for f in reports.rglob("*"):
        if f.is_file():
            text = f.read_bytes()
            for secret in (KEY, KEY[8:24], LOGIN, "hunter2"): assert secret.encode() not in text, (f, secret)


def test_plan_and_bias_cards_are_scrubbed_as_run_pages_are(tmp_path, monkeypatch):
    "A key that reaches a card by another way (a description quoting it) is scrubbed from the page like from a run's report."
    from silverspoon.site.runner import write_plan_card
    t = tmp_path/"project"
    shutil.copytree(ROOT/"params", t/"params"); (t/"settings.ini").write_text((ROOT/"settings.ini").read_text())
    monkeypatch.setenv("SILVERSPOON_ROOT", str(t))
    f = t/"params"/"models"/"described.yaml"
    f.write_text(f'name: described\ndescription: "our key {KEY} behind https://{LOGIN}@proxy.example.com"\nmodel: {{backend: hf, id: HuggingFaceTB/SmolLM2-135M-Instruct, revision: abc}}\n')
    page = write_plan_card(f, t/"reports").read_text()
    assert KEY not in page and "hunter2" not in page and "proxy.example.com" in page


# --- issue 51 A34: ordinary words that look like key markers are published as written ----------------------------------
def test_scrubbing_keeps_ordinary_words_and_removes_key_shapes(tmp_path):
    from silverspoon.run.executor import scrub_outputs
    d = tmp_path/"run"; d.mkdir()
    prose = "the bearer of the warrant; see the sk-learn docs; a Bearer bond; sk-1 and sk-abc"
    secrets = f"Authorization: Bearer abc.def; Bearer eyJhbGciOiJIUzI1NiJ9.payload; {KEY}; sk-ant-api03-AbCdEf0123456789xyz; sk-proj-ab**********yz"
    (d/"items.csv").write_text(f"answer\n{prose}\n{secrets}\n")
    scrub_outputs(d)
    text = (d/"items.csv").read_text()
    assert prose in text, text                                               # published as written, never "bearer ***" / "sk-***"
    for s in ("abc.def", "eyJhbGciOiJIUzI1NiJ9", KEY, "AbCdEf0123456789", "ab**********yz"): assert s not in text, (s, text)
