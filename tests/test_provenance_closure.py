"""Issue 32 item 4: a code change costs one code commit. A run's provenance record hashes the code the run executed (the
study's module and its import closure, the modules that run and publish every run), never the whole package, so an
edit in one study leaves every other study's committed reports verified."""
import json, shutil
from pathlib import Path
import pytest
from conftest import ROOT
from silverspoon.core import SilverspoonError
from silverspoon.engine.provenance import PROVENANCE_FORMAT, code_closure, content_record, notebook_modules, pin_outputs
from silverspoon.site.runner import verify_provenance
from silverspoon.studies import STUDY_REGISTRY, get_study


def _write_package(root:Path, files:dict):
    for rel, src in files.items():
        (root/rel).parent.mkdir(parents=True, exist_ok=True); (root/rel).write_text(src)

# A small package shaped like silverspoon: a runner that imports the card inside a function, a card that finds studies
# through the registry (by name, at run time) and two studies.
_FAKE = {
    "pkg/__init__.py": "",
    "pkg/core.py": "import os\n",
    "pkg/report.py": "from .core import *\n",
    "pkg/runner.py": "from .report import x\nfrom .studies import get_study\ndef verdict():\n    from pkg.card import bias_card\n",
    "pkg/studies/__init__.py": "import importlib\nfrom ..core import *\nREGISTRY = {'a': 'pkg.studies.a:STUDY', 'b': 'pkg.studies.b:STUDY'}\n"
                               "def get_study(n):\n    return importlib.import_module(REGISTRY[n].split(':')[0])\n",
    "pkg/studies/a.py": "from ..core import thing\nfrom pkg.studies import get_study\n",
    "pkg/studies/b.py": "from .. import core\n",
}
_CARD_BY_REGISTRY = "def paper_values(name):\n    from pkg.studies import get_study\n    return get_study(name)\n"
_CARD_NAMING_STUDIES = "def paper_values(name):\n    from pkg.studies import a as sa, b as sb\n    return sb\n"


def test_a_card_that_finds_studies_by_name_keeps_other_studies_out_of_a_run(tmp_path):
    _write_package(tmp_path, {**_FAKE, "pkg/card.py": _CARD_BY_REGISTRY})
    run_of_a = [f.relative_to(tmp_path).as_posix() for f in code_closure(["pkg.studies.a", "pkg.runner"], tmp_path)]
    assert run_of_a == ["pkg/__init__.py", "pkg/card.py", "pkg/core.py", "pkg/report.py", "pkg/runner.py",
                        "pkg/studies/__init__.py", "pkg/studies/a.py"]
    # the same runner with a card that imports the study modules inside a function: every study becomes part of every run
    (tmp_path/"pkg"/"card.py").write_text(_CARD_NAMING_STUDIES)
    assert "pkg/studies/b.py" in [f.relative_to(tmp_path).as_posix() for f in code_closure(["pkg.studies.a", "pkg.runner"], tmp_path)]


def test_the_closure_follows_parents_relative_and_from_package_imports(tmp_path):
    _write_package(tmp_path, {**_FAKE, "pkg/card.py": _CARD_BY_REGISTRY})
    # `from .. import core` names a module; importing pkg.studies.b executes pkg/__init__.py and pkg/studies/__init__.py
    assert [f.relative_to(tmp_path).as_posix() for f in code_closure(["pkg.studies.b"], tmp_path)] == \
           ["pkg/__init__.py", "pkg/core.py", "pkg/studies/__init__.py", "pkg/studies/b.py"]
    with pytest.raises(SilverspoonError, match="'pkg.studies.c' has no source file"): code_closure(["pkg.studies.c"], tmp_path)


def test_the_normative_module_does_not_reach_another_study():
    files = {f.relative_to(ROOT).as_posix() for f in code_closure(["silverspoon.studies.silverspoon.normative"], ROOT)}
    assert {"silverspoon/studies/silverspoon/normative.py", "silverspoon/core.py", "silverspoon/stats/__init__.py", "silverspoon/studies/__init__.py"} <= files
    assert not files & {"silverspoon/studies/letters/letters.py", "silverspoon/studies/stop/stop.py", "silverspoon/site/cli.py", "silverspoon/site/runner.py"}


@pytest.mark.parametrize("study", sorted(STUDY_REGISTRY))
def test_each_study_notebook_exports_the_module_the_registry_names(study):
    # the report records the code from the notebook (its `default_exp`), verify_provenance from the registry: they must agree
    module = STUDY_REGISTRY[study].split(":")[0]
    assert module in notebook_modules(ROOT/"nbs"/get_study(study).notebook, ROOT), (study, module)


def _tree_copy(tmp_path)->Path:
    t = tmp_path/"tree"
    shutil.copytree(ROOT/"silverspoon", t/"silverspoon", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT/"params"/"normative", t/"params"/"normative")
    (t/"nbs").mkdir(); shutil.copy(ROOT/"nbs"/"10_normative.ipynb", t/"nbs"/"10_normative.ipynb")
    return t


def _published_run(tmp_path, tree:Path)->Path:
    "A normative report folder whose record was made from `tree`, its outputs pinned, as the runner publishes it."
    from silverspoon.studies.silverspoon.normative import NORMATIVE_FILES
    rec = content_record("10_normative.ipynb", "params/normative/gpt4-replay.yaml", NORMATIVE_FILES, tree, stores={}, inputs={})   # no store or input file read by this test process
    run_dir = tmp_path/"reports"/"normative"/"gpt4-replay"; run_dir.mkdir(parents=True)
    (run_dir/"summary.csv").write_text("metric,estimate\nP,0.3\n")
    prov = {"study": "normative", "content": rec}
    (run_dir/"provenance.json").write_text(json.dumps(prov))
    from silverspoon.engine.provenance import provenance_digest, PROVENANCE_DIGEST_LABEL
    (run_dir.parent/"gpt4-replay.html").write_text(f"<p>{PROVENANCE_DIGEST_LABEL}: {provenance_digest(prov)}</p>")   # the page shows its record's digest, as a published report does
    pin_outputs(run_dir)
    return run_dir


def test_a_record_changes_only_with_the_code_the_run_executed(tmp_path):
    t = _tree_copy(tmp_path)
    record = lambda: content_record("10_normative.ipynb", "params/normative/gpt4-replay.yaml", (), t, stores={})
    before = record()
    assert before["format"] == PROVENANCE_FORMAT and "silverspoon/studies/silverspoon/normative.py" in before["files"]
    run_dir = _published_run(tmp_path, t)
    assert verify_provenance(run_dir, root=t) == []
    outside = t/"silverspoon"/"studies"/"stop"/"stop_downstream.py"   # another study: never imported by a normative run
    assert "silverspoon/studies/stop/stop_downstream.py" not in before["files"]
    outside.write_text(outside.read_text() + "# a comment in another study\n")
    assert record() == before
    assert verify_provenance(run_dir, root=t) == []
    inside = t/"silverspoon"/"studies"/"silverspoon"/"normative.py"
    inside.write_text(inside.read_text() + "# a comment in this study\n")
    after = record()
    assert after["sha256"] != before["sha256"]
    assert {k for k in before["files"] if before["files"][k] != after["files"][k]} == {"silverspoon/studies/silverspoon/normative.py"}
    assert [m.split(":")[0] for m in verify_provenance(run_dir, root=t)] == ["silverspoon/studies/silverspoon/normative.py"]


def test_a_new_import_brings_its_module_into_the_record(tmp_path):
    t = _tree_copy(tmp_path)
    record = lambda: content_record("10_normative.ipynb", "params/normative/gpt4-replay.yaml", (), t, stores={})["files"]
    assert "silverspoon/studies/stop/stop_downstream.py" not in record()
    nm = t/"silverspoon"/"studies"/"silverspoon"/"normative.py"   # a function-level import the study adds: that module's code now makes the run
    nm.write_text(nm.read_text() + "\ndef _later():\n    from silverspoon.studies.stop import stop_downstream\n")
    assert "silverspoon/studies/stop/stop_downstream.py" in record()


def test_a_record_of_the_previous_format_is_refused(tmp_path):
    t = _tree_copy(tmp_path)
    run_dir = _published_run(tmp_path, t)
    prov = json.loads((run_dir/"provenance.json").read_text()); prov["content"]["format"] = PROVENANCE_FORMAT - 1
    (run_dir/"provenance.json").write_text(json.dumps(prov))
    with pytest.raises(SilverspoonError, match="made by an older silverspoon"): verify_provenance(run_dir, root=t)


# issue 53: the run executor is what every run's record holds; the site (cards, index, pages, CLI) is in none of them
def _lines(files)->int: return sum(len(Path(f).read_text(encoding="utf-8").splitlines()) for f in files)

def test_the_run_closure_holds_no_site_code_and_every_run_shares_at_most_30_percent_of_the_package():
    from silverspoon.engine.provenance import run_modules, run_code_files
    assert run_modules(ROOT) == ["silverspoon.run.executor"], "one module declares itself the run closure (RUN_CLOSURE = True)"
    runs = {(s, b): {f.relative_to(ROOT).as_posix() for f in run_code_files(ROOT/"nbs"/get_study(s).notebook, STUDY_REGISTRY[s].split(":")[0], ROOT, [b])}
            for s in sorted(STUDY_REGISTRY) for b in ("hf", "replay", "openai")}
    site = sorted({f for files in runs.values() for f in files if f.startswith("silverspoon/site/")})
    assert not site, f"site code (cards, index, pages, CLI) in a run's record: {site}"
    assert all("silverspoon/run/executor.py" in files for files in runs.values())
    assert "silverspoon/engine/backends/hf.py" not in runs[("normative", "replay")], "a replay run of a study that loads no model records no hf backend"
    shared = set.intersection(*runs.values())
    package = [f for f in (ROOT/"silverspoon").rglob("*.py") if "__pycache__" not in f.parts and f.name != "_modidx.py"]
    share = _lines(ROOT/f for f in shared)/_lines(package)
    assert share <= 0.30, f"the modules every run shares are {share:.1%} of the package's lines (at most 30%): {sorted(shared)}"


def test_editing_the_card_index_or_pages_leaves_a_run_verifying_and_one_study_the_others(tmp_path):
    t = _tree_copy(tmp_path)
    for s in ("professions", "narratives"):   # narratives reads professions' code (its names and occupations): that dependency is in its record
        shutil.copy(ROOT/"nbs"/get_study(s).notebook, t/"nbs"/get_study(s).notebook)
    run_dir = _published_run(tmp_path, t)
    assert verify_provenance(run_dir, root=t) == []
    for rel in ("silverspoon/site/card.py", "silverspoon/site/runner.py", "silverspoon/site/cli.py", "silverspoon/site/plan.py"):
        (t/rel).write_text((t/rel).read_text() + "\n# a card, index or page edit\n")
    assert verify_provenance(run_dir, root=t) == [], "a site edit must regenerate no run"
    record = lambda s: content_record(get_study(s).notebook, None, (), t, stores={}, inputs={}, module=STUDY_REGISTRY[s].split(":")[0], backends=["hf"])["files"]
    prof, narr = record("professions"), record("narratives")
    assert "silverspoon/studies/silverspoon/professions.py" in narr, "narratives imports professions: its record must say so"
    assert "silverspoon/studies/silverspoon/narratives.py" not in prof
    normative = t/"silverspoon"/"studies"/"silverspoon"/"normative.py"
    normative.write_text(normative.read_text() + "\n# a normative edit\n")
    assert record("professions") == prof and record("narratives") == narr, "a normative edit changes no other study's record"
    assert verify_provenance(run_dir, root=t) == ["silverspoon/studies/silverspoon/normative.py: " + verify_provenance(run_dir, root=t)[0].split(": ", 1)[1]]
