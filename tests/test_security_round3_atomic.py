"""Red-team round 3 (issue 31), finding 13, replayed: a disk that fills while `silverspoon index` (or a card) is written must
leave the old page whole. The child process gets a file-size limit (RLIMIT_FSIZE) smaller than the page it rewrites, the
closest this machine comes to a full disk without root: written in place, the page would be cut at the limit and the old one
lost; written atomically (`core.write_atomic`), the run fails and the old page stays byte for byte."""
import os, sys, shutil, hashlib, subprocess, textwrap
from pathlib import Path
import pytest
from conftest import ROOT

resource = pytest.importorskip("resource")


def _sha(p:Path)->str: return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    "A small reports folder (two committed normative runs) with its index and the SmolLM2 card written once: the old pages."
    from silverspoon.site.runner import build_index, write_card
    d = tmp_path_factory.mktemp("atomic")/"reports"
    for run in ("smollm2-135m", "gpt4-replay"): shutil.copytree(ROOT/"reports"/"normative"/run, d/"normative"/run)
    build_index(d); write_card("smollm2-135m", d)
    return d


def _with_file_limit(code:str, limit:int, cwd:Path)->subprocess.CompletedProcess:
    "Run `code` in a child Python whose files cannot grow past `limit` bytes (a disk that fills at that size)."
    pre = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # past the limit a write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    """)
    return subprocess.run([sys.executable, "-c", pre + code], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_full_disk_during_index_leaves_the_old_index_whole(reports):
    index, validity = reports/"index.html", reports/"validity.html"
    before = _sha(index)
    assert validity.stat().st_size < 20_000 < index.stat().st_size, "the limit must fall between the validity page and the index"
    r = _with_file_limit(f"from silverspoon.site.cli import main; raise SystemExit(main(['index', '--reports-dir', {str(reports)!r}]))", 20_000, ROOT)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "File too large" in r.stdout + r.stderr          # the write failed, and said why
    assert _sha(index) == before                            # the old index, byte for byte (in place it would be cut at 20,000 bytes)
    assert not list(reports.glob(".*.tmp-*"))               # and no temporary left beside it
    r = subprocess.run([sys.executable, "-c", f"from silverspoon.site.cli import main; raise SystemExit(main(['index', '--reports-dir', {str(reports)!r}]))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr             # with room again, the index is rebuilt
    assert index.stat().st_size > 20_000 and index.read_text(encoding="utf-8").rstrip().endswith("</html>")


def test_a_full_disk_while_writing_a_card_leaves_the_old_card_whole(reports):
    page, csv = reports/"models"/"smollm2-135m.html", reports/"models"/"smollm2-135m"/"bias_card.csv"
    before = _sha(page)
    assert csv.stat().st_size < 8_000 < page.stat().st_size
    code = f"from silverspoon.site.runner import write_card; write_card('smollm2-135m', {str(reports)!r})"
    r = _with_file_limit(code, 8_000, ROOT)
    assert r.returncode != 0 and "File too large" in r.stderr, r.stdout + r.stderr
    assert _sha(page) == before
    assert not list((reports/"models").rglob(".*.tmp-*"))
