#!/usr/bin/env python3
"""Split exported notebook cells so each holds one definition (issue 21 item 6: cells that read like the anchors').

    python tools/split_cells.py                 # report the median exported cell length and what a split would reach
    python tools/split_cells.py --write         # split every exported cell of nbs/*.ipynb holding several definitions
    python tools/split_cells.py --write --patch # ... and move the methods of plain classes out to `@patch` cells
    python tools/split_cells.py --write --patch nbs/03_store.ipynb   # only the notebooks named
    python tools/split_cells.py --check-all     # after nbdev_export: every module's `__all__` equals the one at HEAD

A cell is split at its top-level definitions (`def`, `class`): decorators, comments and the constants written above a
definition stay with it, statements after the last one stay with the last. Cells of imports or `__all__` only are
left alone, and so is every cell that does not parse (magics). Cells keep their order and their directives
(`#| export` ...), so the exported module holds the same statements in the same order: the same names, the same
`__all__` (nbdev builds it from the top-level names, and skips `@patch` functions).

`--patch` moves the methods of plain classes (no decorator, no metaclass, not an Enum/NamedTuple/TypedDict/Protocol/
ABC, a collections.abc base such as Mapping) out of the class, each into its own cell right after the class, with fastcore's `@patch` (`self:Class`).
A method stays in the class when moving it would change what it does: it calls zero-argument `super()` or reads
`__class__`, uses a name-mangled `__attr`, has a decorator other than `property` (then `as_prop=True`), its
`.setter` (`set_prop=True`) or `contextlib.contextmanager`, is a static/class method, is `__init__`/`__new__`/
`__init_subclass__`/`__class_getitem__`/`__set_name__`, has a default value that reads a name of the class body, is read by the class body
(`__str__ = __repr__`), or
already annotates its first parameter. The notebook's first exported import cell gets `from fastcore.basics import
patch` when a method moves. Standard library only.
"""
from __future__ import annotations
import argparse, ast, json, re, statistics, subprocess, sys, uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPORT_RE = re.compile(r"^\s*#\|\s*export", re.M)
DIRECTIVE_RE = re.compile(r"^\s*#\|")
KEEP_IN_CLASS = {"__init__", "__new__", "__init_subclass__", "__class_getitem__", "__set_name__"}
SPECIAL_BASES = ("Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "NamedTuple", "TypedDict", "Protocol", "ABC", "Generic",
                 # collections.abc bases: their abstract methods must be defined in the class body (patching later leaves them abstract)
                 "Mapping", "MutableMapping", "Sequence", "MutableSequence", "Set", "MutableSet", "Iterable", "Iterator", "Container", "Sized", "Hashable", "Callable")
PATCH_IMPORT = "from fastcore.basics import patch"

def cell_source(cell)->str: return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
def is_exported(cell)->bool: return cell["cell_type"] == "code" and bool(EXPORT_RE.search(cell_source(cell)))
def n_lines(src:str)->int: return len(src.splitlines())

def exported_lengths(nbs:list[Path])->list[int]:
    "Lines of every exported code cell (directives included) of the notebooks `nbs`."
    return [n_lines(cell_source(c)) for nb in nbs for c in json.loads(nb.read_text(encoding="utf-8"))["cells"] if is_exported(c)]

def _split_directives(src:str)->tuple[list[str], list[str]]:
    "The leading `#|` directive lines of a cell and the rest of its lines."
    lines = src.splitlines()
    i = 0
    while i < len(lines) and DIRECTIVE_RE.match(lines[i]): i += 1
    return lines[:i], lines[i:]

def _is_def(node)->bool: return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))

def _first_line(node)->int:
    "First line of `node`, its decorators included (1-based)."
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])

def _trim(lines:list[str])->list[str]:
    "Lines without leading and trailing blank lines."
    while lines and not lines[0].strip(): lines = lines[1:]
    while lines and not lines[-1].strip(): lines = lines[:-1]
    return lines

def split_code(body:list[str])->list[list[str]]:
    "The lines of one cell (no directives) cut into groups of one top-level definition each (a single group if no cut)."
    try: tree = ast.parse("\n".join(body))
    except SyntaxError: return [body]
    defs = [i for i, n in enumerate(tree.body) if _is_def(n)]
    if len(defs) < 2: return [body]
    cuts = []                                   # 0-based index of the first line of each group after the first
    for prev in defs[:-1]:                      # cut right after a definition (not the last): what follows it up to the
        end = tree.body[prev].end_lineno        # next definition (constants, comments, decorators) goes with the next one
        if tree.body[prev+1].lineno == end: return [body]                 # two statements on one line: leave the cell alone
        cuts.append(end)
    groups, last = [], 0
    for c in cuts: groups.append(body[last:c]); last = c
    groups.append(body[last:])
    groups = [_trim(g) for g in groups]
    return [g for g in groups if g] if all(groups) else [body]

# ------------------------------------------------------------------ @patch
def _names_in(node)->set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}

def _mangled(name:str)->bool: return name.startswith("__") and not name.endswith("__")

def _deco_kind(d)->str|None:
    "How a method decorator moves: 'prop', 'setter:<name>', 'ctx', or None when it cannot move."
    if isinstance(d, ast.Name) and d.id == "property": return "prop"
    if isinstance(d, ast.Attribute) and d.attr == "setter" and isinstance(d.value, ast.Name): return f"setter:{d.value.id}"
    if isinstance(d, ast.Name) and d.id == "contextmanager": return "ctx"
    if isinstance(d, ast.Attribute) and d.attr == "contextmanager" and isinstance(d.value, ast.Name) and d.value.id == "contextlib": return "ctx"
    return None

def class_movable(cls:ast.ClassDef)->bool:
    "A plain class: no decorator (dataclass ...), no metaclass or other keyword, no special base."
    if cls.decorator_list or cls.keywords: return False
    for b in cls.bases:
        name = b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", None) or getattr(getattr(b, "value", None), "id", "")
        if any(s == name for s in SPECIAL_BASES): return False
    return True

def method_blocker(cls:ast.ClassDef, m)->str|None:
    "Why method `m` of `cls` must stay in the class (None when it can move to a `@patch` cell)."
    if m.name in KEEP_IN_CLASS: return "constructor protocol"
    if _mangled(m.name): return "name-mangled name"
    for d in m.decorator_list:
        if _deco_kind(d) is None: return f"decorator {ast.unparse(d)}"
    kinds = [_deco_kind(d) for d in m.decorator_list]
    if len(kinds) > 1: return "several decorators"
    a = m.args
    if not a.args and not a.posonlyargs: return "no self parameter"
    first = (a.posonlyargs + a.args)[0]
    if first.annotation is not None: return "self is annotated"
    for n in ast.walk(m):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super" and not n.args: return "zero-arg super()"
        if isinstance(n, ast.Name) and n.id == "__class__": return "__class__"
        if isinstance(n, (ast.Name, ast.Attribute)) and _mangled(n.id if isinstance(n, ast.Name) else n.attr): return "name-mangled attribute"
    body_names = set()
    for s in cls.body:
        if isinstance(s, ast.Assign): body_names |= {t.id for t in s.targets if isinstance(t, ast.Name)}
        elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name): body_names.add(s.target.id)
        elif _is_def(s): body_names.add(s.name)
    body_reads = {n.id for s in cls.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(s) if isinstance(n, ast.Name)}
    if m.name in body_reads: return "the class body reads it (e.g. `__str__ = __repr__`)"
    defaults = [*a.defaults, *[d for d in a.kw_defaults if d is not None]]
    if any(_names_in(d) & body_names for d in defaults): return "a default reads the class body"
    return None

def patch_class(lines:list[str], cls_name:str)->tuple[list[str], list[list[str]], list[str]]:
    "Lines of a cell holding one plain class: (the class without its movable methods, one `@patch` cell per method, kept methods with why)."
    tree = ast.parse("\n".join(lines))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    members = cls.body
    props_moved: set[str] = set()
    moved, kept, drop = [], [], []            # drop: (start, end) 0-based line ranges leaving the class
    for i, m in enumerate(members):
        if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)): continue
        why = method_blocker(cls, m)
        kind = _deco_kind(m.decorator_list[0]) if m.decorator_list and why is None else None
        if why is None and kind and kind.startswith("setter:"):
            if kind[7:] != m.name or m.name not in props_moved: why = "setter of a property that stays"
        if why is None and kind == "prop":    # a property with a deleter stays whole
            if any(isinstance(o, ast.FunctionDef) and o.name == m.name and any(isinstance(d, ast.Attribute) and d.attr == "deleter" for d in o.decorator_list) for o in members):
                why = "property with a deleter"
        if why: kept.append(f"{cls_name}.{m.name} ({why})"); continue
        if kind == "prop": props_moved.add(m.name)
        start = members[i-1].end_lineno if i > 0 else _first_line(m) - 1   # comments above the method go with it
        if i == 0:
            start = _first_line(m) - 1
            while start - 1 >= cls.lineno and lines[start-1].strip().startswith("#"): start -= 1
        end = m.end_lineno
        if i > 0 and members[i-1].end_lineno == _first_line(m): kept.append(f"{cls_name}.{m.name} (shares a line)"); continue
        chunk = lines[start:end]
        indent = re.match(r"\s*", lines[m.lineno-1]).group(0)
        if any(l.strip() and not l.startswith(indent) for l in chunk): kept.append(f"{cls_name}.{m.name} (indentation)"); continue
        out = [l[len(indent):] if l.strip() else "" for l in chunk]
        # the first parameter gets `:Class`; positions are in the original lines
        first = (m.args.posonlyargs + m.args.args)[0]
        row = first.end_lineno - 1 - start
        col = first.end_col_offset - len(indent)
        out[row] = out[row][:col] + f":{cls_name}" + out[row][col:]
        # decorators: replaced by @patch (keeping contextmanager under it)
        d0 = _first_line(m) - 1 - start
        dn = m.lineno - 1 - start
        deco = {"prop": ["@patch(as_prop=True)"], "ctx": ["@patch", *out[d0:dn]]}.get(kind, ["@patch"])
        if kind and kind.startswith("setter:"): deco = ["@patch(set_prop=True)"]
        out = out[:d0] + deco + out[dn:]
        moved.append(_trim(out)); drop.append((start, end))
    if not moved: return lines, [], kept
    rest = [l for j, l in enumerate(lines) if not any(s <= j < e for s, e in drop)]
    body_left = [s for s in members if not any(s.lineno - 1 >= a and s.end_lineno <= e for a, e in drop)]
    if not body_left:
        at = cls.end_lineno - sum(e - s for s, e in drop)
        rest.insert(at, re.match(r"\s*", lines[members[0].lineno-1]).group(0) + "pass")
    return _trim(rest), moved, kept

def _binds_patch(src:str)->bool:
    "Does exported code other than our import bind the name `patch`?"
    try: tree = ast.parse(src)
    except SyntaxError: return False
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name).split(".")[0] == "patch" for a in n.names):
            if not (isinstance(n, ast.ImportFrom) and n.module == "fastcore.basics"): return True
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == "patch": return True
        if isinstance(n, ast.Name) and n.id == "patch" and isinstance(n.ctx, ast.Store): return True
    return False

# ------------------------------------------------------------------ notebooks
def _new_cell(template:dict, lines:list[str])->dict:
    c = {k: v for k, v in template.items() if k != "id"}
    c["source"] = "\n".join(lines)
    c["outputs"], c["execution_count"] = [], None
    if "id" in template: c["id"] = uuid.uuid4().hex[:8]
    return c

def split_notebook(nb:dict, patch:bool=False)->tuple[dict, list[str]]:
    "`nb` with its exported cells split (and with `patch`, plain classes' methods moved out); notes on what stayed."
    notes, cells, moved_any = [], [], False
    allowed = patch and not any(_binds_patch(cell_source(c)) for c in nb["cells"] if is_exported(c))
    if patch and not allowed: notes.append("`patch` is bound by exported code: no method moved")
    for cell in nb["cells"]:
        if not is_exported(cell): cells.append(cell); continue
        directives, body = _split_directives(cell_source(cell))
        groups = split_code(body)
        out = []
        for g in groups:
            if allowed:
                try: tree = ast.parse("\n".join(g))
                except SyntaxError: tree = None
                classes = [n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef)]
                if len(classes) == 1 and class_movable(classes[0]):
                    tail = _trim(g[classes[0].end_lineno:])   # statements after the class run after its @patch cells
                    g, methods, kept = patch_class(g[:classes[0].end_lineno], classes[0].name)
                    notes += [f"kept in class: {k}" for k in kept]
                    out.append(g); out += methods; moved_any |= bool(methods)
                    if tail: 
                        if methods: out.append(tail)
                        else: out[-1] = g + [""] + tail
                    continue
                for c in classes:
                    if not class_movable(c): notes.append(f"class {c.name} is not plain (decorator, metaclass or special base): methods stay")
            out.append(g)
        if len(out) == 1 and len(groups) == 1 and out[0] is groups[0]: cells.append(cell); continue
        first = dict(cell); first["source"] = "\n".join(directives + out[0])
        cells.append(first)
        cells += [_new_cell(cell, directives + g) for g in out[1:]]
    if moved_any:
        have = any(PATCH_IMPORT in cell_source(c) for c in cells if is_exported(c))
        if not have:
            for c in cells:
                if not is_exported(c): continue
                try: tree = ast.parse(cell_source(c))
                except SyntaxError: continue
                if tree.body and any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body):
                    lines = cell_source(c).splitlines()
                    last_import = max(n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
                    lines.insert(last_import, PATCH_IMPORT)
                    c["source"] = "\n".join(lines); break
            else: notes.append("no exported import cell: add `from fastcore.basics import patch` by hand")
    return {**nb, "cells": cells}, notes

def module_all(src:str)->list[str]|None:
    "The `__all__` list of a module's source (None if it has none)."
    for n in ast.parse(src).body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets): return ast.literal_eval(n.value)
    return None

def check_all(lib:Path, rev:str="HEAD")->list[str]:
    "Modules of `lib` whose `__all__` differs from the one committed at `rev` (run after nbdev_export)."
    bad = []
    for f in sorted(lib.rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], capture_output=True, text=True)
        if old.returncode: continue
        a, b = module_all(old.stdout), module_all(f.read_text(encoding="utf-8"))
        if a != b: bad.append(f"{rel}: __all__ {a} -> {b}")
    return bad

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="notebooks to split (default: every nbs/*.ipynb)")
    ap.add_argument("--nbs", default=str(ROOT/"nbs"), help="folder of notebooks (default: nbs/)")
    ap.add_argument("--write", action="store_true", help="rewrite the notebooks (default: only report)")
    ap.add_argument("--patch", action="store_true", help="also move methods of plain classes to @patch cells")
    ap.add_argument("--check-all", action="store_true", help="compare every module's __all__ with HEAD's (after nbdev_export)")
    ap.add_argument("--verbose", action="store_true", help="list what stays (methods kept in their class)")
    a = ap.parse_args(argv)
    if a.check_all:
        bad = check_all(ROOT/"silverspoon")
        print("\n".join(bad) if bad else "every module's __all__ equals HEAD's")
        return 1 if bad else 0
    nbs = [Path(n) for n in a.notebooks] or sorted(Path(a.nbs).glob("*.ipynb"))
    before = exported_lengths(nbs)
    after = []
    for p in nbs:
        nb = json.loads(p.read_text(encoding="utf-8"))
        new, notes = split_notebook(nb, patch=a.patch)
        after += [n_lines(cell_source(c)) for c in new["cells"] if is_exported(c)]
        if a.verbose:
            for n in notes: print(f"{p.name}: {n}")
        if a.write and new != nb:
            p.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"exported cells: {len(before)} -> {len(after)}; median lines: {statistics.median(before) if before else 0} -> "
          f"{statistics.median(after) if after else 0}" + ("" if a.write else " (dry run: nothing written)"))
    return 0

if __name__ == "__main__": sys.exit(main())
