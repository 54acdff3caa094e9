"""The `Study` contract, checked for every study in `STUDY_REGISTRY` (issue 21, item 4).

Each registered study: its notebook exists and exports the module the registry names; its data files are in the data
registry; its report section starts with `start_run("<name>", ...)` and makes the summary through the study
(`rep.summary(...)`, which calls `summary_rows`), never by calling `summary_rows` itself; and the committed
`summary.csv` of every one of its runs satisfies `check_summary`. A study that breaks the contract fails its run.
"""
import json, re, warnings
from pathlib import Path
import pandas as pd
import pytest
from silverspoon.site.runner import REPORT_MARKER
from silverspoon.studies import STUDY_REGISTRY, check_summary, get_study, start_run

ROOT = Path(__file__).resolve().parent.parent


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
