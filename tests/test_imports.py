"""The import graph of `silverspoon/` has no circle: the runner sits above the studies, the in-notebook report and the
provenance spine below them. Imports are read with `ast`, module-level AND function-level, so a circle cannot hide
behind an import moved into a function."""
import ast, re
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
                while c and c not in mods: c = c.rpartition(".")[0]   # `silverspoon.studies.report.Report` -> silverspoon.studies.report
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
    assert "silverspoon.studies" in g["silverspoon.site.runner"] and "silverspoon.studies.report" in g["silverspoon.studies"]
    assert not g["silverspoon.studies.report"] & {"silverspoon.site.runner", "silverspoon.studies", "silverspoon.site.cli"}
    assert not g["silverspoon.engine.provenance"] & {"silverspoon.studies.report", "silverspoon.site.runner", "silverspoon.studies"}
    site = {m for m in g if m.startswith("silverspoon.site")}
    assert not g["silverspoon.run.executor"] & site, f"the run executor imports site code (cards, index, pages): {sorted(g['silverspoon.run.executor'] & site)}"

# issue 32 item 2: the folders are the layers, named in the README's architecture note, and imports follow them
LAYERS = ["core", "engine", "stats", "instruments", "studies", "run", "site", "testing"]   # a module imports only its own layer or earlier ones
ROOT = PKG.parent

def layer(module:str)->int:
    "The layer index of a dotted module name (`silverspoon.engine.store` -> engine); the package itself is the base."
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else 0

def architecture_note()->str:
    "The `## Architecture` section of nbs/index.ipynb (the README is its rendering)."
    import json
    cells = json.loads((ROOT/"nbs"/"index.ipynb").read_text(encoding="utf-8"))["cells"]
    notes = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith("## Architecture")]
    assert len(notes) == 1, "nbs/index.ipynb: one markdown cell starting with `## Architecture` (the layout note) is expected"
    return notes[0]

def test_every_package_folder_is_in_the_architecture_note_and_no_other():
    note = architecture_note()
    named = set(re.findall(r"`silverspoon/([\w/]+)/`", note))
    folders = {p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py") if "__pycache__" not in p.parts and p.parent != PKG}
    assert not folders - named, f"nbs/index.ipynb `## Architecture`: folders of silverspoon/ it does not name: {sorted(folders - named)}; add each with its purpose"
    assert not named - folders, f"nbs/index.ipynb `## Architecture` names folders that are not packages under silverspoon/: {sorted(named - folders)}"
    order = [m.group(1).split("/")[0].removesuffix(".py") for m in re.finditer(r"`silverspoon/([\w/.]+?)/?`:", note)]
    assert order == LAYERS, f"the note lists the layers as {order}; the import rule (tests/test_imports.py LAYERS) is {LAYERS}"

def test_each_layer_folder_states_its_purpose_in_the_note():
    note = " ".join(architecture_note().split())
    for init in sorted(PKG.glob("*/__init__.py")):
        first = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert first, f"{init.relative_to(ROOT)}: no docstring; its first line is the folder's one-line purpose"
        purpose = re.split(r"[(;]", first.split(": ", 1)[-1])[0].strip().rstrip(".,")   # "Engine: params -> stored answers (...)."
        assert f": {purpose}" in note, f"{init.relative_to(ROOT)}: its purpose {purpose!r} is not what the README's architecture note says"

def module_level_graph(pkg:Path=PKG)->dict:
    "Like `import_graph`, module-level imports only."
    mods, out = module_files(pkg), {}
    for name, (f, is_pkg) in mods.items():
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        targets = set()
        for node in ast.parse(f.read_text(encoding="utf-8"), str(f)).body:
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level else (node.module or "")
                cands = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import): cands = [a.name for a in node.names]
            else: continue
            for c in cands:
                while c and c not in mods: c = c.rpartition(".")[0]
                if c and c != name: targets.add(c)
        out[name] = targets
    return out

def test_a_lower_layer_never_imports_a_higher_one_at_module_level():
    bad = sorted(f"{m} -> {t}" for m, ts in module_level_graph().items() for t in ts if layer(t) > layer(m))
    assert not bad, f"a module imports a later layer at module level (layers {LAYERS}): {bad}; move the shared part down"

def unexplained_function_imports(pkg:Path=PKG)->list[str]:
    "`file:line` of each import of the package's own modules inside a function without a `#` comment on its line(s)."
    out = []
    for name, (f, _) in module_files(pkg).items():
        text = f.read_text(encoding="utf-8"); lines = text.splitlines()
        for fn in ast.walk(ast.parse(text, str(f))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)): continue
            for node in ast.walk(fn):
                own = (isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == pkg.name)) or \
                      (isinstance(node, ast.Import) and any(a.name.split(".")[0] == pkg.name for a in node.names))
                if own and not any("#" in l for l in lines[node.lineno - 1:node.end_lineno]):
                    out.append(f"{f.relative_to(pkg.parent)}:{node.lineno}")
    return sorted(set(out))

def test_unexplained_function_level_imports_are_found(tmp_path):
    pkg = tmp_path/"pkg"; pkg.mkdir(); (pkg/"__init__.py").write_text("")
    (pkg/"a.py").write_text("def f():\n    from pkg.b import x\n    from .b import y   # a circle: b imports a\n    import os\n")
    assert unexplained_function_imports(pkg) == ["pkg/a.py:2"]

def test_every_function_level_own_import_says_why():
    bad = unexplained_function_imports()
    assert not bad, f"imports of silverspoon's own modules inside a function without a comment saying why (a circle, a heavy optional dependency): {bad}; move them to the notebook's import cell or add the reason on the line"

def own_from_imports(pkg:Path=PKG)->list[tuple[str, str, str]]:
    "(importing module, imported package module, name) for every `from X import name` of the package's own modules, anywhere in a file, relative imports resolved."
    mods, out = module_files(pkg), []
    for name, (f, is_pkg) in mods.items():
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if not isinstance(node, ast.ImportFrom): continue
            base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level else (node.module or "")
            if base in mods and base != name: out += [(name, base, a.name) for a in node.names]
    return out

MAX_PRIVATE_IMPORTS = 3   # issue 53: a helper another module needs is public and documented where it lives

def private_imports(pkg:Path=PKG)->list[tuple[str, str, str]]:
    "The imports of another module's private (`_name`, not dunder) names."
    return [t for t in own_from_imports(pkg) if t[2].startswith("_") and not t[2].startswith("__")]

def star_imports(pkg:Path=PKG)->list[tuple[str, str, str]]:
    "The `from <own module> import *` lines: they hide which names a module uses (pyflakes: 'may be undefined')."
    return [t for t in own_from_imports(pkg) if t[2] == "*"]

def test_the_scan_sees_private_and_star_imports(tmp_path):
    pkg = tmp_path/"silverspoon"; (pkg/"sub").mkdir(parents=True)
    (pkg/"__init__.py").write_text("def _helper(): pass\n"); (pkg/"core.py").write_text("X = 1\n_Y = 2\n")
    (pkg/"sub"/"__init__.py").write_text("")
    (pkg/"sub"/"a.py").write_text("from ..core import *\nfrom .. import _helper\ndef f():\n    from silverspoon.core import _Y, X\n")
    assert sorted(private_imports(pkg)) == [("silverspoon.sub.a", "silverspoon", "_helper"), ("silverspoon.sub.a", "silverspoon.core", "_Y")]
    assert star_imports(pkg) == [("silverspoon.sub.a", "silverspoon.core", "*")]

def test_few_private_names_cross_modules():
    found = private_imports()
    assert len(found) <= MAX_PRIVATE_IMPORTS, f"{len(found)} imports of another module's private name (at most {MAX_PRIVATE_IMPORTS}): {found}; make the helper public where it lives (a self-explaining name, a docstring, docments) and import that"

def test_no_star_import_of_own_modules():
    assert not star_imports(), f"{star_imports()} import * from the package's own modules; import the names used (pyflakes lists them as 'may be undefined')"

# issue 53: the site names no study; what a study's released answers reproduce is the studies' own knowledge (studies.released)
def test_site_holds_no_study_name_literal():
    from silverspoon.studies import STUDY_REGISTRY
    names = set(STUDY_REGISTRY)
    assert {"normative", "letters", "stop"} <= names   # the scan below looks for real names
    bad = []
    for f in sorted((PKG/"site").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in names or any(re.search(rf"reports/{n}\b", node.value) for n in names)):
                bad.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not bad, f"site/ names a study (move what the study knows into its Study record or studies/): {bad}"


def test_loading_params_imports_only_the_named_backend_and_nothing_heavy():
    "core resolves `model.backend` to the settings class its backend declares by importlib (issue 53): reading an hf params file imports the hf backend module, no other backend, and neither torch nor transformers nor an HTTP client."
    import subprocess, sys
    code = ("import sys\nfrom silverspoon.core import load_params\n"
            "p = load_params({'study': 'normative', 'run': 'r', 'model': {'backend': 'hf', 'id': 'x', 'dtype': 'float32', 'device': 'cpu'}})\n"
            "print(type(p.model).__name__, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'httpx', 'openai', 'vllm') "
            "or m.startswith('silverspoon.engine.backends.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split(" ", 1)
    assert out[0] == "HFModel" and eval(out[1]) == ["silverspoon.engine.backends.base", "silverspoon.engine.backends.hf"], out
