"""Study notebooks: the `# Report` section must not read a name that only a library example cell bound (issue 9, part 8).

papermill runs a study notebook top to bottom in one kernel, so the library part's example cells (the small
asserting examples after each definition) run before the `# Report` section. A report cell that reads a name such as
`df` or `res`, bound by an example and never by the report itself, would silently report the example's data. The
project's rule: examples must not bind names the report reads; the report section gets everything it uses from
imports, from the papermill `parameters` cell, from the notebook's `#| export` cells, or binds it itself first.
This test checks that statically with `ast`, per notebook, and prints the offending names.
"""
import ast, builtins, json, re
from pathlib import Path
import pytest
from silverspoon.run.executor import REPORT_MARKER
from silverspoon.studies import STUDY_REGISTRY, get_study

from conftest import ROOT


def study_notebook(name: str, root: Path = ROOT) -> Path:
    "The notebook of the registered study `name` (`STUDY_REGISTRY`: a new study is checked as soon as it is registered)."
    return root/"nbs"/get_study(name).notebook
_EXPORT = re.compile(r"^\s*#\|\s*export", re.M)
_ALWAYS = set(dir(builtins)) | {"display", "get_ipython", "__file__", "__name__"}   # what every IPython kernel has


def _code(cell) -> str:
    "A code cell's source as Python: IPython magics and shell lines (`%...`, `!...`) dropped."
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in "".join(cell["source"]).splitlines())


def _bound(tree) -> tuple[set, set]:
    "(names a cell binds at its top level, names of those bound by an import)."
    assigned, imported = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    class Top(ast.NodeVisitor):   # module-level bindings only: function bodies, lambdas, classes and comprehensions are not visited
        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Store): assigned.add(n.id)
        def visit_FunctionDef(self, n): assigned.add(n.name)
        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef
        def visit_Lambda(self, n): pass
        def visit_ListComp(self, n): pass
        visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp
        def visit_ExceptHandler(self, n):
            if n.name: assigned.add(n.name)
            self.generic_visit(n)
    Top().visit(tree)
    return assigned - imported, imported


class _Reads(ast.NodeVisitor):
    "Global names a report cell reads before the report has bound them, visiting statements in execution order."
    def __init__(self, bound: set):
        self.bound, self.early, self.scopes = bound, [], []   # scopes: local names of the enclosing functions/comprehensions

    def _read(self, name):
        if name not in self.bound and not any(name in s for s in self.scopes): self.early.append(name)
    def _store(self, name):
        if not self.scopes: self.bound.add(name)

    def visit_Name(self, n):
        if isinstance(n.ctx, ast.Load): self._read(n.id)
        else: self._store(n.id)
    def visit_Import(self, n):
        for a in n.names: self._store((a.asname or a.name).split(".")[0])
    visit_ImportFrom = visit_Import
    def visit_Assign(self, n):   # the value is evaluated before the targets are bound: `x = x + 1` reads x
        self.visit(n.value)
        for t in n.targets: self.visit(t)
    def visit_AnnAssign(self, n):
        if n.value: self.visit(n.value)
        self.visit(n.target)
    def visit_AugAssign(self, n):
        if isinstance(n.target, ast.Name): self._read(n.target.id)
        self.visit(n.value); self.visit(n.target)
    def visit_NamedExpr(self, n):
        self.visit(n.value); self.visit(n.target)
    def visit_For(self, n):
        self.visit(n.iter); self.visit(n.target)
        for s in n.body + n.orelse: self.visit(s)
    visit_AsyncFor = visit_For
    def visit_ExceptHandler(self, n):
        if n.type: self.visit(n.type)
        if n.name: self._store(n.name)
        for s in n.body: self.visit(s)

    def _function(self, n, args, body):
        for d in getattr(n, "decorator_list", []): self.visit(d)
        for d in [*args.defaults, *[x for x in args.kw_defaults if x]]: self.visit(d)
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]}
        for s in body if isinstance(body, list) else [body]:   # every name the body assigns is local to it (unless declared global)
            for x in ast.walk(s):
                if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store): local.add(x.id)
                elif isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): local.add(x.name)
                elif isinstance(x, (ast.Import, ast.ImportFrom)): local |= {(a.asname or a.name).split(".")[0] for a in x.names}
        self.scopes.append(local)
        for s in body if isinstance(body, list) else [body]: self.visit(s)
        self.scopes.pop()
    def visit_FunctionDef(self, n):
        self._store(n.name)   # bound first: a recursive function reads its own name
        self._function(n, n.args, n.body)
    visit_AsyncFunctionDef = visit_FunctionDef
    def visit_Lambda(self, n): self._function(n, n.args, n.body)
    def visit_ClassDef(self, n):
        for b in [*n.bases, *n.decorator_list]: self.visit(b)
        self._store(n.name)
        self._function(n, ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), n.body)
    def _comprehension(self, n, results):
        self.visit(n.generators[0].iter)   # the first iterable is evaluated in the enclosing scope
        self.scopes.append({x.id for g in n.generators for x in ast.walk(g.target) if isinstance(x, ast.Name)})
        for i, g in enumerate(n.generators):
            if i: self.visit(g.iter)
            for cond in g.ifs: self.visit(cond)
        for r in results: self.visit(r)
        self.scopes.pop()
    def visit_ListComp(self, n): self._comprehension(n, [n.elt])
    visit_SetComp = visit_GeneratorExp = visit_ListComp
    def visit_DictComp(self, n): self._comprehension(n, [n.key, n.value])


def report_reads_example_names(nb_path: Path) -> dict[str, int]:
    "Names the `# Report` section reads before binding them that only a non-exported library cell binds: {name: report cell number}."
    cells = json.loads(Path(nb_path).read_text(encoding="utf-8"))["cells"]
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).lstrip().startswith(REPORT_MARKER))
    examples, allowed = set(), set(_ALWAYS)
    for c in cells[:start]:
        if c["cell_type"] != "code": continue
        assigned, imported = _bound(ast.parse(_code(c)))
        allowed |= imported
        if _EXPORT.search("".join(c["source"])) or "parameters" in c.get("metadata", {}).get("tags", []): allowed |= assigned
        else: examples |= assigned
    examples -= allowed
    bound, offenders = set(allowed), {}
    for i, c in enumerate(cells[start:], start):
        if c["cell_type"] != "code": continue
        reader = _Reads(bound)
        reader.visit(ast.parse(_code(c)))
        for name in reader.early:
            if name in examples: offenders.setdefault(name, i)
    return offenders


def test_checker_finds_a_leaked_example_name(tmp_path):
    # a library example binds `df` and `res`; the report reads `df` before binding it (an offender), binds `res` first
    # (fine), reads `x` from the parameters cell, `helper` from an export cell, and `pd` from an import (all fine)
    md = lambda s: {"cell_type": "markdown", "metadata": {}, "source": [s]}
    code = lambda s, **meta: {"cell_type": "code", "metadata": meta, "source": [s], "outputs": [], "execution_count": None}
    nb = {"cells": [md("# Title"), code("x = 1", tags=["parameters"]), code("#| export\nimport pandas as pd\ndef helper(): return 1"),
                    code("df = pd.DataFrame({'a': [1]}); res = helper()\nfor k in range(2): pass"), md("# Report\nResults"),
                    code("res = helper() + x\nprint(df.shape, res, [k for k in range(3)])\nf = lambda k: k + 1\nprint(f(k))")]}
    p = tmp_path/"nb.ipynb"; p.write_text(json.dumps(nb))
    assert report_reads_example_names(p) == {"df": 5, "k": 5}   # `k` in the comprehension and the lambda is local; the last `k` is the example's


@pytest.mark.parametrize("study", sorted(STUDY_REGISTRY))
def test_report_section_reads_no_example_names(study):
    nb_path = study_notebook(study)
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    assert any(c["cell_type"] == "markdown" and "".join(c["source"]).lstrip().startswith(REPORT_MARKER) for c in cells), \
        f"{nb_path.relative_to(ROOT)} (study {study!r}) has no markdown cell starting with {REPORT_MARKER!r}: the report cannot tell the library part from the report."
    offenders = report_reads_example_names(nb_path)
    if offenders: print(f"{nb_path.name}: " + ", ".join(f"{n} (cell {i})" for n, i in sorted(offenders.items(), key=lambda x: x[1])))
    assert not offenders, (f"{nb_path.relative_to(ROOT)}: the # Report section reads {sorted(offenders)} before binding them, and only "
                           f"library example cells bind them (cells {sorted(set(offenders.values()))}): bind them in the report "
                           "section first, or rename them in the example cells.")


def test_study_notebooks_come_from_the_registry(tmp_path, monkeypatch):
    assert {study_notebook(s).name for s in STUDY_REGISTRY} >= {"10_normative.ipynb", "20_letters.ipynb", "30_stop.ipynb"}
    # a study registered now (a module outside the project) is picked up, and its notebook checked
    (tmp_path/"toy_study_mod.py").write_text(
        "from dataclasses import dataclass\nfrom silverspoon.studies import Study\n@dataclass\nclass ToyTask: pass\n"
        "STUDY = Study('toy', 'Toy', '40_toy.ipynb', ToyTask, lambda p, src: ToyTask(), summary_rows=lambda: None)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(STUDY_REGISTRY, "toy", "toy_study_mod:STUDY")
    md = lambda s: {"cell_type": "markdown", "metadata": {}, "source": [s]}
    code = lambda s: {"cell_type": "code", "metadata": {}, "source": [s], "outputs": [], "execution_count": None}
    (tmp_path/"nbs").mkdir()
    (tmp_path/"nbs"/"40_toy.ipynb").write_text(json.dumps({"cells": [md("# Toy"), code("res = 1"), md("# Report"), code("print(res)")]}))
    assert study_notebook("toy", tmp_path) == tmp_path/"nbs"/"40_toy.ipynb"
    assert report_reads_example_names(study_notebook("toy", tmp_path)) == {"res": 3}
