"""The "Adding a study" recipe (nbs/guide_extending.md, linked from the README), followed literally in a copy of the tree (issue 21, item 5).

The test writes a toy study notebook the way the recipe says (number 40, `#| default_exp studies.toy`, a `parameters`
cell, a library part ending in `STUDY = Study(...)`, a `# Report` section that starts with `start_run` and generates
through `make_backend` -> `store_for` -> `generate_all` -> `rep.counts`), touches nothing else (the registry discovers
the study from its `STUDY = Study(name=...)` line; issue 32), runs `nbdev_export` and `nbdev_clean`, writes a params file
(params/toy/) that names the scripted backend, runs it with `silverspoon run` into a temporary reports folder, and
checks that the index and the bias card's rows pick the toy study's headline up. The copy is found
through `SILVERSPOON_ROOT` and imported first through `PYTHONPATH`, so the project itself is never touched. If a step
of the recipe stops working (or nbs/guide_extending.md stops saying it), this test fails.
"""
import json, os, shutil, subprocess, sys
from pathlib import Path
import nbformat, pandas as pd, pytest

from conftest import ROOT
BIN = Path(sys.executable).parent
NB = "40_toy.ipynb"   # a new paper takes the next free tens (10s SilverSpoon, 20s letters, 30s STOP)

PARAMETERS = '''study = "toy"
run = "notebook-defaults"
description = ""
model = {"backend": "scripted", "id": "text:Yes."}
generation = {"max_new_tokens": 8}
sample = {}
task = {}
out_dir = None
params_source = "notebook defaults"'''

LIBRARY = [  # (markdown why, exported definition, asserting example)
    ("The people asked about: two groups of four names.",
     '''#| export
from __future__ import annotations
from dataclasses import dataclass
import pandas as pd
from silverspoon.core import ParamsError, RunParams, task_params
from silverspoon.engine.backends import GenRequest, user
from silverspoon.studies import Study, Headline
from silverspoon.stats import proportion_ci

NAMES = {"A": ["Ann", "Bo", "Cy", "Di"], "B": ["Ed", "Fay", "Gus", "Hal"]}

def toy_items()->pd.DataFrame:
    "One row per person: item_id, name, group."
    return pd.DataFrame([dict(item_id=f"toy-{i}", name=n, group=g) for i, (g, n) in enumerate((g, n) for g, ns in NAMES.items() for n in ns)])''',
     "assert len(toy_items()) == 8 and set(toy_items().group) == {'A', 'B'}"),
    ("The `task:` section and its check: the question must name the person.",
     '''#| export
@dataclass
class ToyTask:
    question: str = "Should {name} get the loan? Answer Yes or No."

def toy_task(params:RunParams, src:str="<params>")->ToyTask:
    "The validated `task:` section."
    t = task_params(ToyTask, params, src)
    if "{name}" not in t.question: raise ParamsError(f"{src}: field `task.question` must contain {{name}}; add it.")
    return t''',
     '''from silverspoon.core import load_params
_p = load_params({"study": "toy", "run": "r", "model": {"backend": "scripted", "id": "ok"}, "task": {"question": "Why?"}})
try: toy_task(_p, "f.yaml"); raise AssertionError("no error")
except ParamsError as e: assert "f.yaml: field `task.question`" in str(e)'''),
    ("Requests, the parser, the table and the headline rows.",
     '''#| export
def toy_requests(items:pd.DataFrame, question:str)->list[GenRequest]:
    "One chat per person."
    return [GenRequest(r.item_id, user(question.format(name=r.name))) for r in items.itertuples()]

def yes_table(items:pd.DataFrame, res:pd.DataFrame)->pd.DataFrame:
    "Per group: n answered, yes, the yes share with its Wilson CI."
    ans = items.item_id.map(res.drop_duplicates("item_id").set_index("item_id").answer)
    yes = ans.fillna("").str.strip().str.lower().str.startswith("yes")
    rows = []
    for g, d in items.assign(yes=yes, answered=ans.notna()).groupby("group"):
        p, lo, hi = proportion_ci(int(d.yes.sum()), int(d.answered.sum()))
        rows.append(dict(group=g, n=int(d.answered.sum()), yes=int(d.yes.sum()), share=p, ci_low=lo, ci_high=hi))
    return pd.DataFrame(rows)

def summary_rows(table:pd.DataFrame)->pd.DataFrame:
    "Headline rows: the yes share per group and the A-B gap."
    rows = [dict(metric=f"yes share {r.group}", estimate=r.share, ci_low=r.ci_low, ci_high=r.ci_high, n=r.n) for r in table.itertuples()]
    a, b = table.set_index("group").loc["A"], table.set_index("group").loc["B"]
    rows.append(dict(metric="yes share A-B", estimate=a.share - b.share, ci_low=float("nan"), ci_high=float("nan"), n=int(a.n + b.n)))
    return pd.DataFrame(rows)

STUDY = Study(name="toy", title="A toy study (the recipe)", notebook="40_toy.ipynb", task=ToyTask, validate=toy_task,
              data_files=(), summary_rows=summary_rows, units=("person", 1),
              headlines=(Headline("toy", "yes share A-B", "share of Yes answers, group A minus group B", positive="favours group A"),))''',
     '''from silverspoon.studies import get_study
_res = pd.DataFrame({"item_id": [f"toy-{i}" for i in range(8)], "answer": ["Yes."] * 4 + ["No."] * 4})
_t = yes_table(toy_items(), _res)
assert _t.share.tolist() == [1.0, 0.0] and summary_rows(_t).set_index("metric").estimate["yes share A-B"] == 1.0
assert get_study("toy").notebook == "40_toy.ipynb" and get_study("toy").headline == "yes share A-B"'''),
]

REPORT = [
    '''from silverspoon.engine.backends import make_backend
from silverspoon.engine.store import store_for, generate_all
from silverspoon.studies import start_run

params, opts, rep = start_run("toy", dict(study=study, run=run, description=description, model=model, generation=generation,
                                          sample=sample, task=task), out_dir, params_source)''',
    '''items = toy_items()
backend = make_backend(params.model)
store = store_for(params, backend)
res = generate_all(backend, toy_requests(items, opts.question), params.generation, store, run=params.run, progress=False)
rep.counts(res)''',
    '''table = yes_table(items, res)
rep.table(table, "yes_by_group", "Yes answers by group", "share: Wilson 95% CI over the answered items.")
rep.summary(table)
rep.provenance(store=store)''',
]


def toy_notebook():
    "The toy study's notebook, cell by cell as the recipe lists them."
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("# toy\n\n> A toy study built by the README's recipe."), code("#| default_exp studies.toy"),
             code(PARAMETERS, metadata={"tags": ["parameters"]})]
    for why, definition, example in LIBRARY: cells += [md(why), code(definition), code(example)]
    cells += [md("# Report\n\nYes answers by group.")] + [code(c) for c in REPORT]
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


RECIPE_PAGE = ROOT/"nbs"/"guide_extending.md"   # the docs page the README links for the recipe (issue 33)

def readme_recipe()->str:
    "The 'Adding a study' section of the development page, up to the next section."
    text = RECIPE_PAGE.read_text(encoding="utf-8")
    return text[text.index("## Adding a study"):][:20000].split("\n## ", 1)[0]


def test_readme_recipe_says_what_this_test_does():
    recipe = readme_recipe()
    for step in ["nbs/NN_<study>.ipynb", "40", "#| default_exp studies.<study>", "parameters", "# Report", "STUDY = Study(",
                 'headlines=(Headline("<study>"', "nothing to add", "start_run(", "make_backend", "store_for", "generate_all",
                 "rep.counts", "rep.summary(", "nbdev_export", "nbdev_clean", "silverspoon/studies/<study>.py", "backend: scripted",
                 "REGISTRY", "BOUNDS", "silverspoon run"]:
        assert step in recipe, f"nbs/guide_extending.md, 'Adding a study': the recipe no longer mentions {step!r}, a step tests/test_recipe.py follows"


def _tree(tmp_path)->Path:
    "A copy of what a study needs: the library, settings.ini and the studies notebook (the registry's source)."
    t = tmp_path/"tree"
    shutil.copytree(ROOT/"silverspoon", t/"silverspoon", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT/"settings.ini", t/"settings.ini")
    (t/"nbs").mkdir(); shutil.copy(ROOT/"nbs"/"08_studies.ipynb", t/"nbs"/"08_studies.ipynb")
    return t


def _sh(*cmd, cwd, env, timeout=120):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def test_recipe_builds_registers_and_runs_a_toy_study(tmp_path):
    t = _tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(t), "SILVERSPOON_ROOT": str(t), "HF_HUB_OFFLINE": "1"}
    env.pop("SILVERSPOON_STORE", None)
    # 1-3. the notebook: parameters, library part ending in STUDY, report part
    nbformat.write(toy_notebook(), str(t/"nbs"/NB))
    # 4. the registry: nothing to add (it is discovered from the module's `STUDY = Study(name=...)` line)
    studies_nb = (t/"nbs"/"08_studies.ipynb").read_bytes()
    # 5. export the module, clean the notebooks (the copy holds only these two notebooks)
    _sh(BIN/"nbdev_export", cwd=t, env=env)
    _sh(BIN/"nbdev_clean", cwd=t, env=env)
    module = (t/"silverspoon"/"studies"/"toy.py").read_text()
    assert "STUDY = Study(" in module and "studies.toy" not in (t/"silverspoon"/"studies"/"__init__.py").read_text()   # no registry line
    assert (t/"nbs"/"08_studies.ipynb").read_bytes() == studies_nb                   # the studies notebook untouched
    reg = _sh(sys.executable, "-c", "from silverspoon.studies import STUDY_REGISTRY as R; print(R['toy'], list(R)[-1])", cwd=t, env=env)
    assert reg.stdout.split() == ["silverspoon.studies.toy:STUDY", "toy"]          # discovered, after the studies numbered below 40
    # 6. params: one file per run, naming the offline scripted backend and an answers file (relative to the project root)
    (t/"params"/"toy").mkdir(parents=True)
    answers = {f"toy-{i}": "Yes." for i in range(4)} | {"toy-4": "Yes.", "*": "No."}   # A: 4 of 4, B: 1 of 4
    (t/"params"/"toy"/"answers.json").write_text(json.dumps(answers))
    (t/"params"/"toy"/"scripted.yaml").write_text("study: toy\ndescription: the recipe's toy study\n"
                                                   "model: {backend: scripted, id: params/toy/answers.json}\n")
    _sh(sys.executable, "-m", "silverspoon.site.cli", "check", "params/toy/scripted.yaml", cwd=t, env=env)
    # 7. run it into a temporary reports folder
    reports = tmp_path/"reports"
    _sh(sys.executable, "-m", "silverspoon.site.cli", "run", "params/toy/scripted.yaml", "--reports-dir", reports, cwd=t, env=env, timeout=300)
    run_dir = reports/"toy"/"scripted"
    assert (reports/"toy"/"scripted.html").is_file() and "Yes answers by group" in (reports/"toy"/"scripted.html").read_text()
    summary = pd.read_csv(run_dir/"summary.csv").set_index("metric")
    assert summary.loc["yes share A-B", "estimate"] == pytest.approx(0.75) and summary.loc["yes share A", "n"] == 4
    assert (summary.backend == "scripted").all()
    counts = pd.read_csv(run_dir/"generation_counts.csv")
    assert counts.loc[0, ["requests", "answered", "failed"]].tolist() == [8, 8, 0]
    assert (t/"store"/"toy"/"scripted.jsonl").is_file()                                  # generated through the store
    prov = json.loads((run_dir/"provenance.json").read_text())
    assert f"nbs/{NB}" in prov["content"]["files"] and prov["content"]["data"] == {}
    index = (reports/"index.html").read_text()
    assert "Headline metric <b>yes share A-B</b>" in index and "the study&#x27;s first bias-card headline" in index   # the index plots its card headline
    card = _sh(sys.executable, "-c", "import sys; from pathlib import Path; from silverspoon.site.card import card_rows, card_headlines; "
               "r = Path(sys.argv[1]); c, _ = card_rows({'toy': r/'toy'/'scripted'}, r); "
               "print([h.metric for h in card_headlines() if h.study == 'toy']); print(c[c.study.eq('toy')][['headline', 'estimate']].to_json(orient='records'))",
               reports, cwd=t, env=env)
    heads, rows = card.stdout.strip().splitlines()[-2:]
    assert heads == "['yes share A-B']"                                                    # the card's headlines include the toy study's
    assert json.loads(rows) == [{"headline": "yes share A-B", "estimate": 0.75}]           # and the card reads its row from the run
