"Shared test setup: offline model hub, the shared data folder, and helpers to run the CLI."
import os, sys, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not os.environ.get("SILVERSPOON_DATA") and (ROOT.parent/"shared"/"data").is_dir():
    os.environ["SILVERSPOON_DATA"] = str(ROOT.parent/"shared"/"data")
os.environ.pop("MPLBACKEND", None)   # Agg would strip figures from papermill outputs

CLI = [str(Path(sys.executable).parent/"silverspoon")]   # the console script installed by `pip install -e .`

def run_cli(*args, env=None, timeout=600, cwd=ROOT, **kw):
    "Run the `silverspoon` command in a subprocess (from the project root unless `cwd` says otherwise)."
    e = {**os.environ, **(env or {})}
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout, **kw)

@pytest.fixture
def root(): return ROOT

def write_params(path:Path,          # the params file to write (its name is what error messages show)
                 study:str,          # the params `study:` value
                 model:dict,         # the `model:` section
                 task:dict|None=None,        # the `task:` section
                 sample:dict|None=None,      # the `sample:` section
                 generation:dict|None=None,  # the `generation:` section
                 **top)->Path:               # other top-level fields (`run`, `include`, `description`, ...)
    "One params file for a test run, written as JSON (valid YAML): every test writes its runs' params the same way."
    import json
    sections = {"study": study, **top, "model": model, "generation": generation, "sample": sample, "task": task}
    path.write_text(json.dumps({k: v for k, v in sections.items() if v is not None}))
    return path

# --- tiny random models, built once per session (each takes seconds to build; tests only read them)
@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    "`tiny_llama(chat_template=True)`: the folder of a tiny random Llama (silverspoon.testing.build_tiny_llama), built once per kind."
    from silverspoon.testing import build_tiny_llama
    built = {}
    def get(chat_template:bool=True)->Path:
        if chat_template not in built:
            built[chat_template] = build_tiny_llama(tmp_path_factory.mktemp("llama")/("llama" if chat_template else "bare"), chat_template=chat_template)
        return built[chat_template]
    return get

@pytest.fixture(scope="session")
def tiny(tiny_llama)->Path:
    "A tiny random Llama with a ChatML template, shared by every test of the session."
    return tiny_llama()

@pytest.fixture(scope="session")
def bare(tiny_llama)->Path:
    "A tiny random Llama without a chat template (a base model's tokenizer)."
    return tiny_llama(chat_template=False)

@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory):
    "`tiny_classifier(name, labels, seed=0)`: the folder `.../<name>` of a tiny random sequence classifier (silverspoon.instruments.text.build_tiny_classifier), built once per (name, labels, seed)."
    from silverspoon.instruments.text import build_tiny_classifier
    built = {}
    def get(name:str, labels:tuple, seed:int=0)->Path:
        key = (name, tuple(labels), seed)
        if key not in built: built[key] = build_tiny_classifier(tmp_path_factory.mktemp(name)/name, key[1], seed=seed)
        return built[key]
    return get

@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory)->Path:
    "A tiny random BERT (silverspoon.studies.letters.agency.make_tiny_bert), the agency classifier's base model in tests."
    from silverspoon.studies.letters.agency import make_tiny_bert
    return make_tiny_bert(tmp_path_factory.mktemp("bert")/"bert")

PLACED_PHRASES = ["nurse", "qwertyuiop"]   # the phrases test_studies_professions' placing test places

@pytest.fixture(scope="session")
def router_checks_cache(tmp_path_factory)->Path:
    "An instrument cache holding the nearest BLS occupation of every professions `ROUTER_CHECKS` answer (and of `PLACED_PHRASES`), made once here as a run makes it (`score_cached`, same instrument identity, same keys): a junk run has no answer to place, so with it copied into its store the run embeds nothing (no 831 BLS titles per run); its tables are the same."
    from silverspoon.studies.silverspoon.professions import OccupationMatcher, ROUTER_CHECKS, load_bls
    from silverspoon.instruments.text import InstrumentStore, score_cached
    path = tmp_path_factory.mktemp("router-checks")/"instruments.jsonl"
    score_cached(OccupationMatcher(load_bls()), [*ROUTER_CHECKS, *PLACED_PHRASES], InstrumentStore(path), progress=False)
    return path

@pytest.fixture
def cli(capsys, monkeypatch):
    "The `silverspoon` command in this process (fast; an uncaught exception fails the test): returns rc, stdout, stderr."
    from types import SimpleNamespace
    from silverspoon.site.cli import main
    def call(*args, env=None):
        for k, v in (env or {}).items(): monkeypatch.setenv(k, v)
        rc = main([str(a) for a in args]); out = capsys.readouterr()
        return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)
    return call

# --- report runs in the test process (silverspoon.testing.in_process_runs, nbs/09_testing.ipynb): a kernel start and the
# imports in it cost ~8 s a run, and the suite makes some fifty runs a lane. A run the test starts in a subprocess
# (`run_cli`) or in a test marked `jupyter_kernel` starts a kernel, as users' runs do; `--jobs 3` in this process runs
# its notebooks one at a time.
@pytest.fixture(scope="session", autouse=True)
def notebooks_in_process():
    "The session's in-process report runs (module fixtures' included) execute their notebook in this process."
    from silverspoon.testing import in_process_runs
    with in_process_runs() as engine: yield engine

@pytest.fixture(autouse=True)
def jupyter_kernel_when_marked(request, notebooks_in_process):
    "A test marked `jupyter_kernel` runs its reports in a kernel."
    from silverspoon.testing import in_process_runs
    with in_process_runs(enabled=request.node.get_closest_marker("jupyter_kernel") is None) as engine: yield engine

# --- CI lanes (README "Two commands", nbs/guide_ci.md): `make test` runs `pytest --lane main` on the pinned stack, `make test-colab` runs
# `pytest --lane colab` on Colab's stack. A test runs in the main lane unless marked: `@pytest.mark.colab_lane` (stack-
# sensitive: torch/transformers/peft/pandas behaviour that differs between the two stacks) runs in the Colab lane only;
# `@pytest.mark.both_lanes(reason="...")` in both, and says why it is worth running twice. `--lane all` (the default, so
# a plain `pytest tests/test_x.py` runs everything it names) ignores the marks. A lane imports only the files that can
# hold its tests (`file_lanes`). tests/test_lanes.py checks that every collected test belongs to a lane that `make test`
# or `make test-colab` runs, and that `file_lanes` never leaves out a file holding a test of a lane.
LANES = ("main", "colab")

def pytest_addoption(parser):
    parser.addoption("--lane", choices=(*LANES, "all"), default="all",
                     help="run only the tests of one CI lane (main: `make test`, colab: `make test-colab`); all (default): every test")
    parser.addoption("--write-durations", metavar="PATH", default=None,
                     help="record each test file's seconds (setup, call, teardown) under this lane in PATH (JSON; e.g. tests/durations.json)")

def pytest_configure(config):
    if config.getoption("--write-durations") and not hasattr(config, "workerinput"):   # not in xdist's workers
        config.pluginmanager.register(DurationRecorder(config.getoption("--write-durations"), config.getoption("--lane")))
    config.addinivalue_line("markers", "jupyter_kernel: its report runs start a Jupyter kernel, as `silverspoon run` does (the others run in this process: `notebooks_in_process`)")
    config.addinivalue_line("markers", "colab_lane: stack-sensitive (torch/transformers/peft/pandas behaviour): runs in the Colab lane (`make test-colab`) only")
    config.addinivalue_line("markers", "both_lanes(reason): runs in the main and the Colab lane; `reason` says why it is worth running twice")

def lanes_of(item)->set[str]:
    "The CI lanes a collected test runs in: its marks, else the main lane."
    if item.get_closest_marker("both_lanes"): return set(LANES)
    if item.get_closest_marker("colab_lane"): return {"colab"}
    return {"main"}

COLLECTED = pytest.StashKey[dict]()   # node id -> its lanes, for every test collected in this session (before --lane deselects)

# A lane collects only the test files that can hold a test of it: importing a test file costs its imports (peft, spaCy,
# scipy, ...) in each pytest-xdist worker, and the Colab lane runs 65 of ~990 tests (collecting every file took 28 s there,
# the files that can hold a Colab test 12 s). What a file can hold is read from its text, not from importing it.
def file_lanes(path:Path)->set[str]:
    "The lanes a test file's tests can run in, from its source: {'colab'} when a module-level `pytestmark` holds `pytest.mark.colab_lane` and no test is marked `both_lanes`; {'main'} when it names neither mark; else both."
    import ast
    src = Path(path).read_text(encoding="utf-8")
    if "colab_lane" not in src and "both_lanes" not in src: return {"main"}
    if "both_lanes" not in src:
        for node in ast.parse(src).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
                marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                if any(ast.unparse(m) == "pytest.mark.colab_lane" for m in marks): return {"colab"}
    return set(LANES)

def pytest_ignore_collect(collection_path, config):
    "With `--lane main|colab`: a test file none of whose tests can run in the lane (`file_lanes`) is not imported."
    lane = config.getoption("--lane")
    if lane == "all" or not (collection_path.name.startswith("test_") and collection_path.suffix == ".py"): return None
    if lane not in file_lanes(collection_path): return True
    return None

def pytest_collection_modifyitems(config, items):
    config.stash[COLLECTED] = {i.nodeid: (lanes_of(i), i) for i in items}
    lane = config.getoption("--lane")
    if lane != "all":
        keep = [i for i in items if lane in lanes_of(i)]
        config.hook.pytest_deselected(items=[i for i in items if lane not in lanes_of(i)])
        items[:] = keep
    items[:] = longest_first(items, file_seconds(DURATIONS, lane))

# --- The order test files start in. pytest-xdist (`--dist loadfile`) gives a worker one whole file at a time; with
# `--no-loadscope-reorder` (the Makefile's lanes) in the order collected, else files with the most tests first, which can
# start a file of a few long runs last and leave the other core idle until it ends. tests/durations.json holds each
# file's seconds per lane, measured on a 2-core machine like CI's; files start longest first. The figures only order files: a stale
# or missing one costs time, never a result. Rewrite them with `--write-durations tests/durations.json`.
DURATIONS = ROOT/"tests"/"durations.json"

def file_seconds(path:Path, lane:str)->dict:
    "test file -> seconds in `lane` (lane `all`: the lanes' sum), from `path` (JSON: lane -> file -> s); {} without the file."
    if not path.is_file(): return {}
    import json
    data = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for ln in (LANES if lane == "all" else (lane,)):
        for f, s in data.get(ln, {}).items(): out[f] = out.get(f, 0.0) + float(s)
    return out

def longest_first(items:list, seconds:dict)->list:
    "`items` grouped by file, the files in decreasing `seconds` (a file without a figure counts as the median figure), each file's tests in their own order; ties keep the collection order."
    files = list(dict.fromkeys(i.nodeid.split("::")[0] for i in items))
    known = sorted(seconds.values())
    typical = known[len(known)//2] if known else 0.0
    rank = {f: (-seconds.get(f, typical), k) for k, f in enumerate(files)}
    return sorted(items, key=lambda i: rank[i.nodeid.split("::")[0]])   # sorted is stable: a file's tests keep their order

class DurationRecorder:
    "With `--write-durations PATH`: each test file's seconds (setup, call, teardown) in this run's lane, merged into PATH at the end. Registered in the controlling process only; with pytest-xdist it receives every worker's reports."
    def __init__(self, path:str, lane:str): self.path, self.lane, self.seconds = Path(path), lane, {}

    def pytest_runtest_logreport(self, report):
        f = report.nodeid.split("::")[0]; self.seconds[f] = self.seconds.get(f, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        if not self.seconds: return
        import json
        data = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
        data[self.lane] = dict(sorted({**data.get(self.lane, {}), **{f: round(s, 1) for f, s in self.seconds.items()}}.items()))
        self.path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
