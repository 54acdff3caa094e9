"""CI lanes (issue 21 item 7): `make test` runs `pytest --lane main`, `make test-colab` runs `pytest --lane colab`; every
collected test belongs to a lane one of them runs, and a test run in both lanes says why (tests/conftest.py)."""
import re
import pytest
from conftest import ROOT, COLLECTED, LANES, lanes_of, file_lanes, longest_first, file_seconds, DURATIONS, DurationRecorder

RULE = re.compile(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?![=])\s*(.*)$")

def make_rules(makefile:str)->dict[str, tuple[list[str], list[str]]]:
    "target -> (prerequisites, recipe lines) of a Makefile (explicit rules; continuation lines joined)."
    rules, current = {}, None
    for line in makefile.replace("\\\n", " ").splitlines():
        if line.startswith("\t") and current:
            for t in current: rules[t][1].append(line.strip())
        elif (m := RULE.match(line)) and not line.startswith((".PHONY", "#")):
            current = m.group(1).split()
            for t in current: rules.setdefault(t, ([], []))[0].extend(m.group(2).split())
        elif line.strip() and not line.startswith("#"): current = None
    return rules

def pytest_lanes(rules, target:str, seen=None)->set[str]:
    "The `--lane` values of every pytest command that `make target` runs, following its prerequisites."
    seen = set() if seen is None else seen
    if target in seen or target not in rules: return set()
    seen.add(target)
    prereqs, recipe = rules[target]
    out = {m for line in recipe if "pytest" in line for m in re.findall(r"--lane[ =]+([A-Za-z_]+)", line)}
    for line in recipe:
        if "pytest" in line and "--lane" not in line: out.add("all")
    for p in prereqs: out |= pytest_lanes(rules, p, seen)
    return out

def test_make_targets_run_one_lane_each():
    rules = make_rules((ROOT/"Makefile").read_text(encoding="utf-8"))
    assert pytest_lanes(rules, "test") == {"main"} and pytest_lanes(rules, "test-colab") == {"colab"}
    fake = "test: a b\na:\n\tpytest -q tests --lane main; rc=$$?\nb: c\nc:\n\tpython -m pytest \\\n\t  --lane colab tests\n"
    assert pytest_lanes(make_rules(fake), "test") == {"main", "colab"}   # prerequisites and continued lines are followed
    assert pytest_lanes(make_rules("t:\n\tpytest tests\n"), "t") == {"all"}

@pytest.mark.both_lanes(reason="a lane imports only the test files that can hold its tests (conftest `file_lanes`): each lane checks the files it collects, and only the Colab lane collects the Colab-only files")
def test_every_collected_test_runs_in_a_ci_lane(request):
    rules = make_rules((ROOT/"Makefile").read_text(encoding="utf-8"))
    run = pytest_lanes(rules, "test") | pytest_lanes(rules, "test-colab")
    collected = request.config.stash[COLLECTED]   # every test of this session's files, before --lane deselected any
    assert request.node.nodeid in collected
    wider = [n for n, (lanes, _) in collected.items() if not lanes <= file_lanes(ROOT/n.split("::")[0])]
    assert wider == [], f"tests in a lane their file's text does not show (conftest `file_lanes` would leave the file out of that lane): {wider}"
    orphans = [n for n, (lanes, _) in collected.items() if not (lanes & run or "all" in run)]
    assert orphans == [], f"tests no CI lane runs (Makefile lanes {sorted(run)}): {orphans}"
    twice = [n for n, (lanes, item) in collected.items() if lanes == set(LANES) and not (item.get_closest_marker("both_lanes").kwargs.get("reason") or "").strip()]
    assert twice == [], f"marked both_lanes without a reason= saying why they run twice: {twice}"
    known = {m.split(":")[0].split("(")[0].strip() for m in request.config.getini("markers")}   # registered, pytest's own included
    typos = {n: sorted(bad) for n, (_, item) in collected.items() if (bad := {m.name for m in item.iter_markers()} - known)}
    assert typos == {}, f"unregistered marks (a misspelt colab_lane would silently put a test in the main lane): {typos}"
    if len({n.split("::")[0] for n in collected}) > 5:   # the whole suite: both lanes hold tests
        per_lane = {lane: sum(lane in lanes for lanes, _ in collected.values()) for lane in LANES}
        assert all(per_lane.values()), per_lane

def test_file_lanes_reads_the_marks_from_the_text(tmp_path):
    def lanes(src):
        f = tmp_path/"test_x.py"; f.write_text(src); return file_lanes(f)
    assert lanes("import pytest\ndef test_a(): pass\n") == {"main"}
    assert lanes("import pytest\npytestmark = pytest.mark.colab_lane\ndef test_a(): pass\n") == {"colab"}
    assert lanes("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.colab_lane]\n") == {"colab"}
    # a mark on one test, a file-level mark with a test run in both lanes, or the name in a string: either lane
    assert lanes("import pytest\n@pytest.mark.colab_lane\ndef test_a(): pass\ndef test_b(): pass\n") == {"main", "colab"}
    assert lanes("import pytest\npytestmark = pytest.mark.colab_lane\n@pytest.mark.both_lanes(reason='x')\ndef test_a(): pass\n") == {"main", "colab"}
    assert lanes("M = 'colab_lane'\ndef test_a(): pass\n") == {"main", "colab"}
    # the committed files: the Colab lane imports a few of them, the main lane all but the Colab-only ones
    files = sorted(ROOT.glob("tests/test_*.py"))
    colab_only = [f.name for f in files if file_lanes(f) == {"colab"}]
    assert "test_backends_gguf.py" in colab_only and "test_lanes.py" not in colab_only
    assert 0 < sum("colab" in file_lanes(f) for f in files) < len(files) / 2

def test_a_lane_does_not_import_the_files_it_cannot_run(tmp_path):
    import subprocess, sys
    (tmp_path/"conftest.py").write_text(   # the project's lane option and filter, nothing else of its conftest
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('project_conftest', {str(ROOT/'tests'/'conftest.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "pytest_addoption, pytest_ignore_collect = m.pytest_addoption, m.pytest_ignore_collect\n")
    (tmp_path/"test_main.py").write_text("def test_m(): pass\n")
    (tmp_path/"test_colab.py").write_text("import pytest\npytestmark = pytest.mark.colab_lane\nraise SystemExit('imported')\n")
    run = lambda lane: subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", str(tmp_path), "--lane", lane],
                                      capture_output=True, text=True, cwd=tmp_path)
    main = run("main")
    assert main.returncode == 0 and "1 test collected" in main.stdout, main.stdout + main.stderr   # the Colab-only file was never imported
    every = run("all")
    assert "imported" in every.stdout + every.stderr   # --lane all imports every file

def test_files_start_longest_first_and_keep_their_tests_in_order(tmp_path):
    class Item:
        def __init__(self, nodeid): self.nodeid = nodeid
    items = [Item(n) for n in ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/c.py::t1", "tests/c.py::t2", "tests/d.py::t1"]]
    order = lambda sec: [i.nodeid for i in longest_first(items, sec)]
    assert order({"tests/a.py": 1, "tests/b.py": 30, "tests/c.py": 5, "tests/d.py": 2}) == [
        "tests/b.py::t1", "tests/c.py::t1", "tests/c.py::t2", "tests/d.py::t1", "tests/a.py::t1", "tests/a.py::t2"]
    # a file without a figure counts as the median (here 5): after b, tied with c, which was collected later
    assert order({"tests/b.py": 30, "tests/c.py": 5, "tests/d.py": 2}) == [
        "tests/b.py::t1", "tests/a.py::t1", "tests/a.py::t2", "tests/c.py::t1", "tests/c.py::t2", "tests/d.py::t1"]
    assert order({}) == [i.nodeid for i in items]   # no figures: the collection order
    f = tmp_path/"durations.json"; f.write_text('{"main": {"tests/a.py": 3}, "colab": {"tests/a.py": 4, "tests/b.py": 1}}')
    assert file_seconds(f, "main") == {"tests/a.py": 3} and file_seconds(f, "all") == {"tests/a.py": 7, "tests/b.py": 1}
    assert file_seconds(tmp_path/"none.json", "main") == {}

def test_write_durations_adds_each_files_seconds_under_its_lane(tmp_path):
    from types import SimpleNamespace as R
    f = tmp_path/"d.json"; f.write_text('{"main": {"tests/a.py": 9, "tests/old.py": 2}, "colab": {"tests/a.py": 4}}')
    rec = DurationRecorder(str(f), "main")
    for nodeid, s in [("tests/a.py::t1", 1.0), ("tests/a.py::t1", 0.5), ("tests/b.py::t[x]", 2.25)]: rec.pytest_runtest_logreport(R(nodeid=nodeid, duration=s))
    rec.pytest_sessionfinish(None)
    assert file_seconds(f, "main") == {"tests/a.py": 1.5, "tests/b.py": 2.2, "tests/old.py": 2} and file_seconds(f, "colab") == {"tests/a.py": 4}

def test_the_committed_durations_name_test_files_of_both_lanes():
    for lane in LANES:
        sec = file_seconds(DURATIONS, lane)
        assert sec and all((ROOT/f).is_file() for f in sec), f"{DURATIONS}: lane {lane} names missing files: rewrite it with --write-durations"

@pytest.mark.parametrize("marks,lanes", [([], {"main"}), (["colab_lane"], {"colab"}), (["both_lanes"], {"main", "colab"}),
                                         (["colab_lane", "both_lanes"], {"main", "colab"})])
def test_lanes_of_reads_the_marks(marks, lanes):
    class Item:
        def get_closest_marker(self, name): return getattr(pytest.mark, name) if name in marks else None
    assert lanes_of(Item()) == lanes

def _lane():
    import importlib.util
    spec = importlib.util.spec_from_file_location("colab_lane", ROOT/"tools"/"colab_lane.py")
    lane = importlib.util.module_from_spec(spec); spec.loader.exec_module(lane)
    return lane

def test_colab_reports_picks_one_run_per_study_backend_and_factor(tmp_path):
    lane = _lane()
    kinds = [["n/a.yaml", "normative", "gpt4-replay", "replay", ""], ["n/b.yaml", "normative", "alpaca-replay", "replay", ""],
             ["n/c.yaml", "normative", "smollm2", "hf", ""], ["n/d.yaml", "normative", "smollm2--quantization-8bit", "hf", "quantization"],
             ["n/e.yaml", "normative", "smollm2--quantization-4bit", "hf", "quantization"], ["n/f.yaml", "normative", "smollm2--reference", "hf", "reference"],
             ["s/g.yaml", "stop", "gpt4-replay", "replay", ""], ["s/h.yaml", "stop", "smollm2", "hf", ""],
             ["s/i.yaml", "stop", "smollm2--quantization-4bit", "hf", "quantization"], ["s/j.yaml", "stop", "smollm2--prompt_variant-x", "hf", "prompt_variant"],
             ["s/k.yaml", "stop", "smollm2--reference", "hf", "reference"]]
    picked = lane.pick_runs(kinds)
    # quantization and reference once over all studies (the first study's); a prompt variant and a backend in every study
    assert [k[2] for k in picked] == ["alpaca-replay", "smollm2", "smollm2--quantization-4bit", "smollm2--reference", "gpt4-replay", "smollm2", "smollm2--prompt_variant-x"]
    assert len(lane.pick_runs(kinds, every=True)) == len(kinds)   # make colab-reports-all: every run
    # the picked runs' outputs and every card leave the reports copy: a run that fails cannot leave the committed files standing in
    for f in ("normative/alpaca-replay/summary.csv", "normative/gpt4-replay/summary.csv", "models/m/bias_card.csv"):
        (tmp_path/f).parent.mkdir(parents=True, exist_ok=True); (tmp_path/f).write_text("x")
    (tmp_path/"normative"/"alpaca-replay.html").write_text("x")
    lane.clear_outputs(tmp_path, picked)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == ["normative/gpt4-replay/summary.csv"]

def test_colab_reports_picks_every_study_and_factor_of_the_default_runs():
    import subprocess, sys, json
    lane = _lane()
    from silverspoon.site.cli import default_params_files
    files = [str(f) for f in default_params_files()]
    r = subprocess.run([sys.executable, "-c", lane.RUN_KINDS, *files], capture_output=True, text=True, cwd=ROOT, check=True)
    kinds = json.loads(r.stdout)
    picked = lane.pick_runs(kinds)
    assert {k[1] for k in picked} == {k[1] for k in kinds} and len(picked) < len(kinds)          # every study, fewer runs
    assert {(k[1], k[3]) for k in picked} == {(k[1], k[3]) for k in kinds}                        # every backend of every study
    assert {(k[1], k[4]) for k in picked if k[4] == "prompt_variant"} == {(k[1], k[4]) for k in kinds if k[4] == "prompt_variant"}   # every study's variants
    assert {k[4] for k in picked} == {k[4] for k in kinds}                                        # every factor
