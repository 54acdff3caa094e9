"End to end through the `silverspoon` command: papermill report, secrets, kill -9 and resume."
import os, json, time, signal, subprocess
from pathlib import Path
import pandas as pd
import pytest
from conftest import run_cli, write_params, CLI, ROOT
from silverspoon.testing import FakeChatServer, in_process_runs

@pytest.mark.jupyter_kernel   # a whole default run, as a user's `silverspoon run` makes it
def test_replay_report_reproduces_paper(tmp_path, cli):
    # a minimal file: the sections it leaves out take the schema's defaults (all 3000 items, 2000 replicates),
    # never the notebook's small test defaults
    p = tmp_path/"gpt4-minimal.yaml"; p.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\n")
    r = cli("run", p, "--reports-dir", tmp_path)   # in this process; the kernel is its own
    assert r.returncode == 0, r.stdout + r.stderr
    html = (tmp_path/"normative"/"gpt4-minimal.html").read_text()
    assert "Table 2" in html and "Provenance" in html
    assert "def parse_answer" not in html             # library definitions are not in the report
    # the report opens with its instruments table: right below the run line, before any result; a pointer where it was computed
    assert html.index("<strong>Run</strong>") < html.index("<h3>Instruments") < html.index("instruments table of this run") < html.index("Table 2: agreement")
    assert html.count("<h3>Instruments") == 1
    # ... and its verdict between the two: the study's card headlines (the paper's CKC contrast, the share against the annotators') with estimate [95% CI], n, test and MDE
    verdict = html[html.index("<h3>Verdict</h3>"):html.index("<h3>Instruments")]
    assert html.index("<strong>Run</strong>") < html.index("<h3>Verdict</h3>") and all(m in verdict for m in ("CKC lower-upper", "share favouring underprivileged - annotators", "MDE"))
    out = tmp_path/"normative"/"gpt4-minimal"
    assert pd.read_csv(out/"generation_counts.csv")["requests"].item() == 3000
    vs = pd.read_csv(out/"table2_vs_paper.csv")
    assert len(vs) == 11 and vs["match"].all(), vs    # GPT4 column = the paper's "GPT4o" row: its 10 numbers and its CKC contrast (lower - upper)
    assert vs.gold.tolist()[-1] == "lower-end minus upper-end" and vs.paper_label.tolist()[-1] == "CKC lower-upper"
    t2 = pd.read_csv(out/"table2.csv")
    assert {"faithful", "corrected", "faithful_ci_low", "faithful_ci_high", "n_items"} <= set(t2.columns)
    prov = json.loads((out/"provenance.json").read_text())
    assert prov["params"]["model"]["id"] == "GPT4" and prov["datasets"]
    assert "normative" in (tmp_path/"index.html").read_text()

@pytest.mark.jupyter_kernel
@pytest.mark.both_lanes(reason="the Colab lane's picked runs execute in process (tools/colab_lane.py run): this is where a kernel run on Colab's stack (its ipykernel, IPython, matplotlib) is shown to publish the same")
def test_a_run_in_the_test_process_publishes_what_a_kernel_run_publishes(tmp_path, cli):
    "The tests run their reports in the test process (conftest `notebooks_in_process`): one run made both ways gives the same tables byte for byte and the same outputs cell by cell."
    import nbformat
    p = write_params(tmp_path/"both.yaml", "normative", {"backend": "replay", "id": "GPT4"}, sample={"n": 60, "seed": 0}, run="both")
    engines = []
    for way, in_process in (("kernel", False), ("in-process", True)):
        with in_process_runs(enabled=in_process) as engine:
            r = cli("run", p, "--reports-dir", tmp_path/way, "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/way/"store")})
        assert r.returncode == 0, r.stdout + r.stderr
        engines.append(engine)
    assert engines == ["silverspoon-saves-throttled", "silverspoon-in-process"]   # two different executors, not one run twice
    a, b = tmp_path/"kernel"/"normative", tmp_path/"in-process"/"normative"
    csvs = sorted(f.name for f in (a/"both").glob("*.csv"))
    assert "table2.csv" in csvs and csvs == sorted(f.name for f in (b/"both").glob("*.csv"))
    assert [n for n in csvs if (a/"both"/n).read_bytes() != (b/"both"/n).read_bytes()] == []
    def outputs(d:Path):   # per code cell: its outputs' kinds and mime types (execnb writes a cell's streams before its displays: compared as sets)
        nb = nbformat.read(str(d/"both.ipynb"), as_version=4)
        return [sorted({(o.output_type, *sorted(o.get("data", {}))) for o in c.outputs}) for c in nb.cells if c.cell_type == "code"]
    ka, kb = outputs(a), outputs(b)
    assert ka == kb and any(("display_data", "image/png", "text/plain") in c for c in ka)   # figures included
    assert_publishable(b/"both.ipynb")

NOISE = ["application/vnd.jupyter.widget", "jupyter-widgets", "var element = $(", "Warning:", "tests/test_", "KeyboardInterrupt"]   # tests/parser_sets/ may be named: it is a reference a reader can open

def assert_publishable(nb_path:Path):
    "A published executed notebook and its HTML: present together, no widget or warning noise, no timings or machine paths, under the budget."
    import nbformat
    from silverspoon.run.executor import NOTEBOOK_BUDGET_BYTES, WIDGET_MIME
    from silverspoon.core import project_root
    html, text = nb_path.with_suffix(".html").read_text(), nb_path.read_text()
    assert nb_path.stat().st_size <= NOTEBOOK_BUDGET_BYTES, (nb_path, nb_path.stat().st_size)
    nb = nbformat.reads(text, as_version=4)
    assert not {"widgets", "papermill"} & set(nb.metadata), nb_path
    assert not any({"papermill", "execution"} & set(c.metadata) for c in nb.cells), nb_path
    assert not any(WIDGET_MIME in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs), nb_path
    assert any(o.get("output_type") == "execute_result" or o.get("data") for c in nb.cells if c.cell_type == "code" for o in c.outputs)  # outputs kept
    assert ".partial-" not in text and str(project_root()) not in text, nb_path
    for needle in NOISE: assert needle not in html, (nb_path.with_suffix(".html"), needle)

def test_committed_reports_have_their_notebooks(root):
    "Every default run's executed notebook is committed beside its HTML, stripped, under the budget; its report shows no noise."
    from silverspoon.core import load_params
    from silverspoon.site.cli import default_params_files
    runs = [load_params(f) for f in default_params_files()]
    nbs = [root/"reports"/p.study/f"{p.run}.ipynb" for p in runs]
    if not any(f.exists() for f in nbs):
        pytest.skip("no executed notebook is committed under reports/ yet: `make reports` (run after the change that publishes them) writes them")
    assert [f for f in nbs if not f.exists()] == []
    for f in nbs: assert_publishable(f)

def test_rerun_of_an_unchanged_report_changes_only_its_provenance(tmp_path, cli):
    "Run twice, the published notebook differs only in the provenance block (its `created` and `wall_seconds`): no timings, random ids or addresses."
    import nbformat
    p = tmp_path/"small.yaml"
    p.write_text("study: normative\nmodel: {backend: replay, id: GPT4}\nsample: {n: 30, stratify_by: topic, seed: 0}\ntask: {n_boot: 50}\n")
    published = []
    for _ in range(2):
        r = cli("run", p, "--reports-dir", tmp_path/"r", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})   # in this process; each kernel is its own
        assert r.returncode == 0, r.stdout + r.stderr
        published.append(nbformat.read(str(tmp_path/"r"/"normative"/"small.ipynb"), as_version=4))
    provenance = lambda o: "<h3>Provenance</h3>" in o.get("data", {}).get("text/html", "")
    for nb in published:
        assert sum(provenance(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs) == 1
        for c in nb.cells:
            if c.cell_type == "code": c.outputs = [o for o in c.outputs if not provenance(o)]
    assert nbformat.writes(published[0]) == nbformat.writes(published[1])

def _openai_params(path:Path, srv, n=12, **model):
    m = {"backend": "openai", "id": "fake-model", "base_url": srv.base_url, "api_key_env": "SILVERSPOON_TEST_API_KEY",
         "concurrency": 1, "batch_size": 2, "timeout_s": 5.0, "max_retries": 1, **model}
    import yaml
    path.write_text(yaml.safe_dump({"study": "normative", "model": m, "generation": {"max_new_tokens": 32},
                                    "sample": {"n": n, "stratify_by": "topic", "seed": 1},
                                    "task": {"prompt_style": "gpt", "n_boot": 100}}))
    return path

def test_api_key_never_in_outputs(tmp_path):
    secret = "sk-test-" + os.urandom(12).hex()
    with FakeChatServer(api_key=secret, echo_auth=True) as srv:
        p = _openai_params(tmp_path/"secret-run.yaml", srv)
        r = run_cli("run", p, "--reports-dir", tmp_path/"reports",
                    env={"SILVERSPOON_TEST_API_KEY": secret, "SILVERSPOON_STORE": str(tmp_path/"store")})
        assert r.returncode == 0, r.stdout + r.stderr
        assert srv.stats()["requests"] >= 12            # the key was used: the server accepts only it
    assert secret not in r.stdout + r.stderr
    assert "KeyboardInterrupt" not in r.stdout + r.stderr      # the kernel is shut down without the needless interrupt
    # this run generated, so its kernel drew progress-bar widgets: the published notebook and HTML carry none of them
    assert_publishable(tmp_path/"reports"/"normative"/"secret-run.ipynb")
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert any(f.suffix == ".html" for f in files) and any(f.suffix == ".ipynb" for f in files) and any(f.suffix == ".jsonl" for f in files)
    for f in files: assert secret not in f.read_text(errors="ignore"), f

def _store_keys(path:Path):
    return [json.loads(l)["key"] for l in path.read_text().splitlines() if l.strip().endswith("}")]

def test_kill9_then_resume_same_tables(tmp_path, cli):
    with FakeChatServer(delay=0.25) as srv:
        p = _openai_params(tmp_path/"resume.yaml", srv, n=30)
        env = {**os.environ, "SILVERSPOON_TEST_API_KEY": "k", "SILVERSPOON_STORE": str(tmp_path/"store")}
        store = tmp_path/"store"/"normative"/"resume.jsonl"
        proc = subprocess.Popen([*CLI, "run", str(p), "--reports-dir", str(tmp_path/"a"), "--no-index"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        t0 = time.time()
        while time.time() - t0 < 120 and (not store.exists() or len(_store_keys(store)) < 6): time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL); proc.wait()
        srv.delay = 0.0                                     # the slow server only had to let the kill land mid-run
        done_before = len(_store_keys(store))
        assert 6 <= done_before < 30, done_before          # killed mid-run
        asked_before = srv.stats()["requests"]
        r = cli("run", p, "--reports-dir", tmp_path/"a", "--no-index", env={k: env[k] for k in ("SILVERSPOON_TEST_API_KEY", "SILVERSPOON_STORE")})
        assert r.returncode == 0, r.stdout + r.stderr
        keys = _store_keys(store)
        assert len(keys) == len(set(keys)) == 30            # nothing lost, nothing twice
        assert srv.stats()["requests"] - asked_before <= 30 - done_before + 2   # only the missing ones (+ the batch in flight)
        # an uninterrupted run into a fresh store gives the same tables
        r = cli("run", p, "--reports-dir", tmp_path/"b", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store_b")})
        assert r.returncode == 0, r.stdout + r.stderr
    a, b = tmp_path/"a"/"normative"/"resume", tmp_path/"b"/"normative"/"resume"
    csvs = sorted(f.name for f in a.glob("*.csv") if f.name != "generation_counts.csv")
    assert "table2.csv" in csvs
    for name in csvs: pd.testing.assert_frame_equal(pd.read_csv(a/name), pd.read_csv(b/name), obj=name)
