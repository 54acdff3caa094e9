"Exported cells read like the anchors' (issue 21 item 6): short cells of one definition, and `tools/split_cells.py` that gets there."
import re, statistics, sys
from pathlib import Path
import numpy as np
from conftest import ROOT
sys.path.insert(0, str(ROOT/"tools"))
import split_cells as sc

def exported_cell_chars(package:Path)->list[int]:
    "Characters of each exported cell of an nbdev package, read from its modules (nbdev writes `# %% <notebook> <cell id>` above each cell)."
    out = []
    for f in sorted(package.rglob("*.py")):
        if f.name == "_modidx.py": continue
        parts = re.split(r"^# %% .*$", f.read_text(encoding="utf-8"), flags=re.M)[1:]
        out += [len(p.strip()) for p in parts if p.strip()]
    return out

# Exported cells by characters, as a multiple of fastcore's (the anchor, its installed modules): lines alone let a cell of
# long lines pass. Issue 32 measured 3.6x at the median; the budget holds what the split cells reached and is lowered as
# the notebooks are split further (the goal: fastcore's own, 1x).
CHAR_BUDGET = {"median": 3.5, "p90": 3.5}

def test_the_character_measure_sees_long_lines(tmp_path):
    "Two modules with the same cells by lines: the one whose lines are long measures longer."
    for name, width in (("short", 10), ("long", 200)):
        (tmp_path/name).mkdir()
        (tmp_path/name/"m.py").write_text("".join(f"# %% ../nbs/00.ipynb {i}\n" + ("x = 1 #" + "y"*width + "\n")*4 for i in range(3)))
    short, long = exported_cell_chars(tmp_path/"short"), exported_cell_chars(tmp_path/"long")
    assert len(short) == len(long) == 3 and min(long) > 10*max(short)

def test_exported_cells_stay_within_the_character_budget_against_fastcore():
    import fastcore
    ours, anchor = exported_cell_chars(ROOT/"silverspoon"), exported_cell_chars(Path(fastcore.__file__).parent)
    assert len(ours) > 100 and len(anchor) > 100, f"too few exported cells to compare: silverspoon {len(ours)}, fastcore {len(anchor)}"
    for stat, limit in CHAR_BUDGET.items():
        f = statistics.median if stat == "median" else (lambda xs: float(np.percentile(xs, 90)))
        ratio = f(ours)/f(anchor)
        assert ratio <= limit, (f"exported cells' {stat}: {f(ours):.0f} characters, {ratio:.2f}x fastcore's {f(anchor):.0f} (budget {limit}x): "
                                "split the longest cells (tools/split_cells.py) or move prose into markdown cells")

SRC = '''#| export
import contextlib
LIMIT = 3   # a constant above its function

def double(x): return 2*x

# a comment above a class
class Base:
    "A base."
    def hello(self): return "base"

class Counter(Base):
    "Counts."
    unit = "items"
    def __init__(self, n=0): self.n, self.__secret = n, 7
    # ---- reading
    @property
    def size(self)->int: return self.n
    @size.setter
    def size(self, v): self.n = v
    def bump(self, by:int=1):
        "Add `by`."
        self.n += by; return self
    def hello(self): return "counter " + super().hello()
    def secret(self): return self.__secret
    def label(self, u=unit): return f"{self.n} {u}"
    @contextlib.contextmanager
    def held(self):
        self.n += 100
        try: yield self
        finally: self.n -= 100
    @staticmethod
    def zero(): return 0
    def __len__(self): return self.n
    def _private(self): return "p"
    def __repr__(self): return f"Counter({self.n})"
    __str__ = __repr__

LAST = double(LIMIT)'''

def _nb(src): return {"cells": [{"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {}, "outputs": [], "source": src}],
                      "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

def _module(nb)->dict:
    "Execute the exported cells of `nb` in order, as the exported module would."
    ns = {"__name__": "m"}
    exec("\n\n".join(sc.cell_source(c) for c in nb["cells"] if sc.is_exported(c)), ns)
    return ns

def _behaviour(ns):
    c = ns["Counter"](2)
    with c.held() as h: inside = h.n
    c.size = 5
    return (ns["LAST"], c.size, c.bump(2).n, c.hello(), str(c), c.secret(), c.label(), inside, c.n, ns["Counter"].zero(), len(c), c._private(),
            ns["Counter"].__doc__, ns["Counter"].bump.__doc__, ns["Counter"].bump.__qualname__)

def test_split_keeps_behaviour_and_all_and_moves_only_safe_methods():
    nb = _nb(SRC)
    new, notes = sc.split_notebook(nb, patch=True)
    sources = [sc.cell_source(c) for c in new["cells"]]
    assert all(s.startswith("#| export\n") for s in sources)
    assert "LIMIT = 3" in sources[0] and "def double" in sources[0] and "from fastcore.basics import patch" in sources[0]
    assert sources[1].startswith("#| export\n# a comment above a class\nclass Base")
    cls = next(s for s in sources if "class Counter" in s)
    for stays in ("def __init__", "def hello", "def secret", "def label", "def zero", "unit = ", "def __repr__"):
        assert stays in cls, stays
    moved = [s for s in sources if "@patch" in s]
    assert [s.splitlines()[2 if "----" in s else 1] for s in moved] == [
        "@patch", "@patch(as_prop=True)", "@patch(set_prop=True)", "@patch", "@patch", "@patch", "@patch"]
    assert "def hello(self:Base):" in moved[0] and "# ---- reading" in moved[1] and "@contextlib.contextmanager" in moved[4]
    assert "def bump(self:Counter, by:int=1):" in moved[3] and "def _private" in moved[-1]
    assert sources[-1] == "#| export\nLAST = double(LIMIT)"                      # after the @patch cells of its class
    assert any("zero-arg super()" in n for n in notes) and any("name-mangled" in n for n in notes) and any("class body" in n for n in notes)
    assert _behaviour(_module(new)) == _behaviour(_module(nb))
    from nbdev.maker import ModuleMaker
    from execnb.nbio import dict2nb
    exported = lambda n: [c for c in dict2nb(n).cells if sc.is_exported(c)]
    mm = ModuleMaker(dest=ROOT, name="x", nb_path="x.ipynb")
    assert list(mm.make_all(exported(new))) == list(mm.make_all(exported(nb))) == ["LIMIT", "LAST", "double", "Base", "Counter"]

def test_cells_that_must_stay_whole_stay_whole():
    for src in ["#| export\nimport os\nfrom pathlib import Path",                     # imports only
                "#| export\n__all__ = ['a']\ndef a(): pass",                           # one definition
                "#| export\ndef a(): pass\n%time a()",                                # a magic: does not parse
                "#| export\n@dataclass\nclass P:\n    x: int = 1\n    def f(self): return self.x"]:   # a dataclass keeps its methods
        new, _ = sc.split_notebook(_nb(src), patch=True)
        assert [sc.cell_source(c) for c in new["cells"]] == [src]
    new, _ = sc.split_notebook(_nb("#| export\ndef a(): pass\ndef b(): pass"), patch=False)
    assert [sc.cell_source(c) for c in new["cells"]] == ["#| export\ndef a(): pass", "#| export\ndef b(): pass"]
    assert new["cells"][1]["id"] != new["cells"][0]["id"]
    new, _ = sc.split_notebook(_nb("#| export\nfrom unittest.mock import patch\nclass A:\n    def f(self): pass"), patch=True)
    assert len(new["cells"]) == 1                                                # `patch` is taken: nothing moves
