"""The `Study` contract, checked for every study in `STUDY_REGISTRY` (issue 21, item 4).

Each registered study: its notebook exists and exports the module the registry names; its data files are in the data
registry; its report section starts with `start_run("<name>", ...)` and makes the summary through the study
(`rep.summary(...)`, which calls `summary_rows`), never by calling `summary_rows` itself; and the committed
`summary.csv` of every one of its runs satisfies `check_summary`. A study that breaks the contract fails its run.

The invariants every study's committed runs keep are tested here once, parametrised over the registry and the runs (never
one copy per study): items.csv gives back the card headlines, each headline has its n and an interval or the reason for
none, and every default params file validates. A new study is checked by registering it and committing its runs.
"""
import json, re, warnings
import pandas as pd
import pytest
from silverspoon.run.executor import REPORT_MARKER
from silverspoon.studies import STUDY_REGISTRY, check_summary, get_study, start_run

from conftest import ROOT


def _cells(study):
    nb = json.loads((ROOT/"nbs"/study.notebook).read_text(encoding="utf-8"))["cells"]
    start = next(i for i, c in enumerate(nb) if c["cell_type"] == "markdown" and "".join(c["source"]).lstrip().startswith(REPORT_MARKER))
    src = lambda cs: ["".join(c["source"]) for c in cs if c["cell_type"] == "code"]
    return src(nb[:start]), src(nb[start:])


@pytest.mark.parametrize("name", sorted(STUDY_REGISTRY))
def test_registered_study_keeps_the_contract(name):
    from silverspoon.engine.data import lookup
    s = get_study(name)
    nb = ROOT/"nbs"/s.notebook
    assert nb.is_file(), f"STUDY_REGISTRY[{name!r}]: its Study names notebook {s.notebook!r}, which is not in nbs/"
    library, report = _cells(s)
    module = STUDY_REGISTRY[name].split(":")[0].removeprefix("silverspoon.")
    assert any(re.search(rf"^#\|\s*default_exp\s+{re.escape(module)}\s*$", c, re.M) for c in library), \
        f"nbs/{s.notebook}: no `#| default_exp {module}` cell, but STUDY_REGISTRY[{name!r}] = {STUDY_REGISTRY[name]!r}"
    for f in s.data_files: lookup(f)   # raises naming the file when the data registry lacks it
    assert re.search(rf"start_run\(\s*[\"']{re.escape(name)}[\"']", report[0]), \
        f"nbs/{s.notebook}: the first # Report cell must start the run with start_run({name!r}, ...)"
    text = "\n".join(report)
    assert "rep.summary(" in text and "rep.provenance(" in text, f"nbs/{s.notebook}: the report writes no summary or no provenance"
    assert not re.search(r"rep\.summary\(\s*summary_rows\(", text), \
        f"nbs/{s.notebook}: pass summary_rows' arguments to rep.summary(...), which calls the study's summary_rows and checks it"


@pytest.mark.parametrize("name", sorted(STUDY_REGISTRY))
def test_committed_summaries_satisfy_the_contract(name):
    s = get_study(name)
    files = sorted((ROOT/"reports"/name).glob("*/summary.csv"))
    for f in files:
        df = pd.read_csv(f).drop(columns=["run", "model", "backend"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # the headline metric is there too
            check_summary(df, s)


@pytest.fixture
def toy_study(tmp_path, monkeypatch):
    "Register a toy study (a module outside the project) whose summary_rows is given by the test."
    (tmp_path/"toy_contract_mod.py").write_text(
        "from dataclasses import dataclass\nimport pandas as pd\nfrom silverspoon.studies import Study, Headline\n"
        "@dataclass\nclass ToyTask: pass\n"
        "ROWS = {}\n"
        "def summary_rows(kind): return ROWS[kind]\n"
        "STUDY = Study('toy', 'Toy', '40_toy.ipynb', ToyTask, lambda p, src: ToyTask(), summary_rows=summary_rows, headlines=(Headline('toy', 'gap', 'a gap'),), units=('item', 1))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(STUDY_REGISTRY, "toy", "toy_contract_mod:STUDY")
    import toy_contract_mod
    good = pd.DataFrame({"metric": ["gap"], "estimate": [0.1], "ci_low": [0.0], "ci_high": [0.2], "n": [10]})
    toy_contract_mod.ROWS.update(good=good, no_estimate=good.drop(columns="estimate"), with_run=good.assign(run="x"), no_headline=good.assign(metric="other"))
    yield toy_contract_mod


def test_summary_goes_through_the_study_and_a_broken_study_fails(toy_study, tmp_path):
    pm = dict(study="toy", run="r", model={"backend": "scripted", "id": "ok"})
    params, opts, rep = start_run("toy", pm, tmp_path/"out", "toy.yaml", show=False)
    assert rep.study is toy_study.STUDY
    from IPython.utils.capture import capture_output
    with capture_output():
        rep.summary("good")   # the arguments go to the study's summary_rows
        with pytest.raises(TypeError, match=r"nbs/40_toy.ipynb \(study 'toy'\): summary_rows returned no column\(s\) \['estimate'\]"):
            rep.summary("no_estimate")
        with pytest.raises(TypeError, match="which the report adds itself"):
            rep.summary("with_run")
        with pytest.warns(UserWarning, match="no row for the headline metric 'gap'"):
            rep.summary("no_headline")
    out = pd.read_csv(tmp_path/"out"/"summary.csv")
    assert out.columns[:4].tolist() == ["run", "model", "backend", "metric"] and out.backend.eq("scripted").all()


# issue 53 item 3: a study's metrics are data in its `Study` record, not registered as an import side effect; the lookup
# answers the same whatever was imported before it
_FRESH_LOOKUP = """
import json, sys
import silverspoon.studies as S
studies_imported = sorted(m for m in sys.modules if m.startswith("silverspoon.studies.") and m not in ("silverspoon.studies.report",))
out = {}
for name in S.STUDY_REGISTRY:
    parts = [name] + [f"{name}/{b}" for b in ("bbq", "crows_pairs", "stereoset")] * (name == "downstream")
    out.update({f"{p}|{m}": S.metric_definition(m, p) for p in parts for m in S.study_metrics(p)})
print(json.dumps({"imported_first": studies_imported, "definitions": out}))
"""


def test_metric_definitions_come_from_the_study_records_whatever_was_imported_first():
    "A fresh interpreter that imports only `silverspoon.studies` (no study module) gets every study's metric definitions through `study_metrics` / `metric_definition`, the same as this process, which has imported the studies in another order."
    import os, subprocess, sys
    from silverspoon.studies import STUDY_REGISTRY, metric_definition, study_metrics
    from silverspoon.stats.agreement import AGREEMENT_METRICS
    r = subprocess.run([sys.executable, "-c", _FRESH_LOOKUP], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    fresh = json.loads(r.stdout.strip().splitlines()[-1])
    assert [m for m in fresh["imported_first"] if m.count(".") >= 3] == [], "importing silverspoon.studies imported a study module"
    got = fresh["definitions"]
    here = {}
    for name in reversed(list(STUDY_REGISTRY)):   # the other order, in this process
        for p in [name] + [f"{name}/{b}" for b in ("bbq", "crows_pairs", "stereoset")] * (name == "downstream"):
            here.update({f"{p}|{m}": metric_definition(m, p) for m in study_metrics(p)})
    assert got == here
    counts = {s: sum(k.split("|")[0].split("/")[0] == s for k in got) for s in STUDY_REGISTRY}
    assert counts == {"normative": 4, "professions": 0, "narratives": 3, "letters": 6, "stop": 7, "stop_scale": 0, "downstream": 11}
    assert got["normative|CKC lower-upper"].startswith("Cohen's kappa with the lower-end annotators' gold labels minus kappa")
    assert got["letters|formality_hd"] == "lexical formality F (0-100)" and got["stop|Pl"] == "Cl/nl: low-severity progressions with score 0.0"
    assert got["downstream/crows_pairs|% stereotypical"] == "100 x stereotypical sentence chosen / answered pairs (50 = no preference)"
    assert got["downstream|answer rate change, BBQ (adapter - base)"].startswith("the adapter's BBQ answer rate minus the base model's")
    assert all(v.strip() for v in got.values())
    assert metric_definition("kappa", "letters") == AGREEMENT_METRICS["kappa"].definition   # the shared metrics, in every study
    assert metric_definition("P", "stop_scale") == "" and metric_definition("P", "stop") == got["stop|P"]   # STOP's P is STOP's own


def test_a_study_with_malformed_metrics_is_refused_naming_the_fix():
    from dataclasses import make_dataclass
    from silverspoon.studies import Study
    from silverspoon.stats import Metric
    Task = make_dataclass("Task", [("n_boot", int, 10)])
    make = lambda metrics: Study("toy", "Toy", "40_toy.ipynb", Task, lambda p, src: Task(), summary_rows=print, metrics=metrics)
    share = Metric("share", "share of toy items answered", scale=(0, 1), study="toy")
    assert make((share, Metric("share", "the share in part a", study="toy/a"))).metrics[0] is share   # a part may reuse a name
    fix = "fix the `STUDY = Study(...)` cell of the study's notebook"
    for bad, says in (([share], "metrics must be a tuple of silverspoon.stats.Metric(..., study='toy')"),
                      ((("share", "a definition"),), "metrics must be a tuple of silverspoon.stats.Metric"),
                      ((Metric("share", "a share"),), "study='toy'"),                  # a shared metric (study "") is not the study's own
                      ((Metric("share", "a share", study="other"),), "study='toy/<part>'"),
                      ((share, Metric("share", "the same name again", study="toy")), "['toy: share'] more than once")):
        with pytest.raises(TypeError) as e: make(bad)
        assert says in str(e.value) and fix in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------------------------------------------
# Contracts over every committed run of every registered study (issue 32 item 5): one parametrised test per invariant, the
# committed reports being what the current code published (tests/test_reports.py checks their provenance against the tree).
def committed_runs()->list:
    "(study, run folder name) of every committed run under reports/ whose study is registered, in a stable order."
    return [(name, f.parent.name) for name in sorted(STUDY_REGISTRY) for f in sorted((ROOT/"reports"/name).glob("*/summary.csv"))]

RUNS = committed_runs()
ITEMS_RUNS = [(s, r) for s, r in RUNS if get_study(s).headlines_from_items is not None]


def test_every_registered_study_has_committed_runs_and_the_list_is_not_empty():
    assert {s for s, _ in RUNS} == set(STUDY_REGISTRY), f"registered studies without a committed run: {set(STUDY_REGISTRY) - {s for s, _ in RUNS}}"
    assert len(ITEMS_RUNS) >= len(STUDY_REGISTRY)


@pytest.mark.parametrize("study,run", ITEMS_RUNS, ids=[f"{s}/{r}" for s, r in ITEMS_RUNS])
def test_items_give_back_every_card_headline_of_the_summary(study, run):
    "`headlines_from_items(items.csv)` recomputes each card headline's summary.csv row (the row the card reads, `headline_row`): the factor bootstrap resamples exactly what the card shows."
    import math
    from silverspoon.site.card import headline_row
    s, out = get_study(study), ROOT/"reports"/study/run
    assert (out/"items.csv").is_file(), f"{out}/items.csv is missing: the study declares headlines_from_items, so every run must write it (rerun it)"
    items = pd.read_csv(out/"items.csv")
    assert len(items) and items["item"].notna().all(), f"{out}/items.csv: every row needs the unit it resamples (`item`)"
    got = s.headlines_from_items(items)
    assert s.headlines and {h.metric for h in s.headlines} <= set(got), (sorted(got), [h.metric for h in s.headlines])
    for h in s.headlines:
        want = headline_row(h, out)["estimate"]
        assert (math.isnan(want) and math.isnan(got[h.metric])) or abs(got[h.metric] - want) <= 1e-9, (h.metric, got[h.metric], want)


@pytest.mark.parametrize("study,run", RUNS, ids=[f"{s}/{r}" for s, r in RUNS])
def test_every_card_headline_has_its_n_and_an_interval_or_the_reason_for_none(study, run):
    "Each card headline row of each committed run: n and n_units; a CI around the estimate, or too few units for one (stats.BOOT_MIN_UNITS) and then the exact or permutation test it got instead (or none below stats.MIN_UNITS), or no estimate at all."
    import math
    from silverspoon import stats
    from silverspoon.site.card import headline_row
    out = ROOT/"reports"/study/run
    for h in get_study(study).headlines:
        r = headline_row(h, out)
        where = f"{out}/summary.csv, headline {h.metric!r}"
        assert r["n"] == r["n"] and r["n"] >= 0, f"{where}: no n"
        units = r["n_units"] if r["n_units"] == r["n_units"] else r["n"]
        if math.isnan(r["estimate"]) or units < stats.MIN_UNITS: continue
        if r["ci_low"] == r["ci_low"]:
            assert r["ci_low"] <= r["estimate"] <= r["ci_high"], f"{where}: the CI [{r['ci_low']}, {r['ci_high']}] misses the estimate {r['estimate']}"
        else:
            assert units < stats.BOOT_MIN_UNITS and str(r["test"]).strip() not in ("", "nan"), \
                f"{where}: no CI at {units:g} units and no test instead"


@pytest.mark.parametrize("name", sorted(STUDY_REGISTRY))
def test_every_default_params_file_of_the_study_validates(name):
    "Each `params/<study>/*.yaml` (bases resolved) loads and passes its study's `validate`, and names its own study."
    from silverspoon.site.cli import default_params_files
    from silverspoon.core import load_params
    s, files = get_study(name), default_params_files(name)
    assert files, f"params/{name}/ holds no default run"
    for f in files:
        p = load_params(f)
        assert p.study == name, f"{f}: study {p.study!r} in params/{name}/"
        assert isinstance(s.validate(p, str(f)), s.task), f"{f}: {name}'s validate returned no {s.task.__name__}"
