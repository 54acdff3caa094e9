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

@pytest.fixture
def cli(capsys, monkeypatch):
    "The `silverspoon` command in this process (fast; an uncaught exception fails the test): returns rc, stdout, stderr."
    from types import SimpleNamespace
    from silverspoon.cli import main
    def call(*args, env=None):
        for k, v in (env or {}).items(): monkeypatch.setenv(k, v)
        rc = main([str(a) for a in args]); out = capsys.readouterr()
        return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)
    return call
