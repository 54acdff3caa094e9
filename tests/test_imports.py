"""The import graph of `silverspoon/` has no circle: the runner sits above the studies, the in-notebook report and the
provenance spine below them. Imports are read with `ast`, module-level AND function-level, so a circle cannot hide
behind an import moved into a function."""
import ast
from pathlib import Path
from conftest import ROOT

PKG = ROOT/"silverspoon"
ALLOWED = set()   # no circle is allowed (the letters <-> agency one was broken in issue 21)

def module_files(pkg:Path=PKG)->dict:
    "Dotted module name -> (file, is_package) for every source file of the package (`_modidx.py` is nbdev's index, not code)."
    out = {}
    for f in sorted(pkg.rglob("*.py")):
        if "__pycache__" in f.parts or f.name == "_modidx.py": continue
        parts = list(f.relative_to(pkg.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out

def import_graph(pkg:Path=PKG)->dict:
    "Module -> the set of package modules it imports anywhere in its file (top level, functions, methods), relative imports resolved."
    mods, graph = module_files(pkg), {}
    for name, (f, is_pkg) in mods.items():
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level else (node.module or "")
                candidates = [base] + [f"{base}.{a.name}" for a in node.names]   # `from .studies import stop` imports a module
            elif isinstance(node, ast.Import): candidates = [a.name for a in node.names]
            else: continue
            for c in candidates:
                while c and c not in mods: c = c.rpartition(".")[0]   # `silverspoon.report.Report` -> silverspoon.report
                if c and c != name: targets.add(c)
        graph[name] = targets
    return graph

def cycles(graph:dict)->list[list[str]]:
    "One shortest circle through each strongly connected group of modules (Tarjan), as `[a, b, ..., a]`."
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop(); on.discard(w); group.add(w)
                if w == v: break
            if len(group) > 1: groups.append(group)
    for v in sorted(graph):
        if v not in index: visit(v)
    out = []
    for g in groups:   # breadth-first from the group's first module back to itself, inside the group
        start = min(g); paths = {start: [start]}; frontier = [start]; found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & g):
                    if w == start: found = paths[v] + [start]; break
                    if w not in paths: paths[w] = paths[v] + [w]; nxt.append(w)
                if found: break
            frontier = nxt
        out.append(found)
    return out

def without_allowed(graph:dict)->dict:
    "`graph` minus the edges of the allowed pairs."
    return {m: {t for t in ts if frozenset({m, t}) not in ALLOWED} for m, ts in graph.items()}

def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path/"pkg"; (pkg/"sub").mkdir(parents=True)
    (pkg/"__init__.py").write_text("")
    (pkg/"a.py").write_text("from .b import thing\n")
    (pkg/"b.py").write_text("def f():\n    from pkg.sub.c import g\n")
    (pkg/"sub"/"__init__.py").write_text("")
    (pkg/"sub"/"c.py").write_text("import os\nclass K:\n    def m(self):\n        from ..a import x\n")
    g = import_graph(pkg)
    assert g["pkg.a"] == {"pkg.b"} and g["pkg.b"] == {"pkg.sub.c"} and g["pkg.sub.c"] == {"pkg.a"}
    assert cycles(g) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    (pkg/"b.py").write_text("import pkg.sub\n")
    assert cycles(import_graph(pkg)) == []

def test_no_import_circle_in_silverspoon():
    found = cycles(without_allowed(import_graph()))
    assert not found, "import circles (module -> ... -> itself; move the shared part below both): " + "; ".join(" -> ".join(c) for c in found)

def test_runner_is_above_the_studies_and_report_below():
    g = import_graph()
    assert "silverspoon.studies" in g["silverspoon.runner"] and "silverspoon.report" in g["silverspoon.studies"]
    assert not g["silverspoon.report"] & {"silverspoon.runner", "silverspoon.studies", "silverspoon.cli"}
    assert not g["silverspoon.provenance"] & {"silverspoon.report", "silverspoon.runner", "silverspoon.studies"}
