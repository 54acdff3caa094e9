"""`auto` instruments (issue 20): a task field `auto` becomes the paper's model at its pinned commit when the hub answers
for that commit, else the offline stand-in; the hub is never asked under HF_HUB_OFFLINE. The probe is monkeypatched
(reachable, unreachable, sha unknown), never called for real; the report of an offline `auto` run says what it used."""
import json, shutil
import pandas as pd
import pytest
from conftest import run_cli, ROOT
from silverspoon.instruments import text
from silverspoon.instruments.text import (AUTO, PAPER_CLASSIFIERS, PAPER_NLI, PAPER_REVISIONS, HFTextClassifier, NLIClassifier, instrument_id,
                              resolve_paper_instrument)

SST = PAPER_CLASSIFIERS["sentiment"][0]
FORMALITY = PAPER_CLASSIFIERS["formality"][0]


@pytest.fixture
def probe(monkeypatch):
    "Replace the hub probe: `probe.answer` is what the hub says; `probe.calls` what it was asked."
    class Probe:
        answer, calls = "verified", []
        def __call__(self, model_id, revision, timeout=5): self.calls.append((model_id, revision)); return self.answer
    p = Probe(); p.calls = []
    monkeypatch.setattr(text, "hub_revision_status", p)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return p


def test_reachable_hub_gives_the_paper_model_at_its_pinned_commit(probe):
    r = resolve_paper_instrument(AUTO, SST, "VADER")
    sha = PAPER_REVISIONS["distilbert/distilbert-base-uncased-finetuned-sst-2-english"][0]
    assert (r.model_id, r.revision, r.status) == (SST, sha, "paper")
    assert r.reason == f"paper model {SST} at {sha}, verified on the hub"
    assert probe.calls == [("distilbert/distilbert-base-uncased-finetuned-sst-2-english", sha)]   # the organisation's id, the pinned sha
    ident = HFTextClassifier(r.model_id, "positive", revision=r.revision).identity()               # what every cache key hashes
    assert ident["model"] == SST and ident["revision"] == sha and AUTO not in json.dumps(ident)


def test_unreachable_hub_gives_the_stand_in(probe):
    probe.answer = "unreachable (ConnectError)"
    r = resolve_paper_instrument(AUTO, FORMALITY, "formality_hd only")
    assert (r.model_id, r.revision, r.status, r.label) == (None, None, "stand-in", "stand-in")
    assert r.reason == "hub unreachable (ConnectError): stand-in (formality_hd only), levels not comparable to the paper"


def test_a_pinned_sha_the_hub_does_not_know_gives_the_stand_in_and_says_so(probe):
    probe.answer = "unknown revision"
    r = resolve_paper_instrument(AUTO, PAPER_NLI, "no NLI: Table 6 not run")
    assert r.model_id is None and r.status == "stand-in"
    assert f"the hub has no commit {PAPER_REVISIONS[PAPER_NLI][0]} of {PAPER_NLI}" in r.reason and "PAPER_REVISIONS" in r.reason
    assert r.reason.endswith("levels not comparable to the paper")


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_offline_never_asks_the_hub(probe, monkeypatch, value):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    r = resolve_paper_instrument(AUTO, SST, "VADER")
    assert r.model_id is None and r.reason.startswith("hub not asked (HF_HUB_OFFLINE is set)") and probe.calls == []


def test_null_and_named_models_never_ask_the_hub(probe, tmp_path):
    assert resolve_paper_instrument(None, SST, "VADER").reason == "not asked for (null): stand-in (VADER), levels not comparable to the paper"
    named = resolve_paper_instrument("distilbert-base-uncased-finetuned-sst-2-english", SST, "VADER")
    assert (named.status, named.revision) == ("given", PAPER_REVISIONS["distilbert/distilbert-base-uncased-finetuned-sst-2-english"][0])
    pinned = resolve_paper_instrument(FORMALITY, FORMALITY, "x", revision="a" * 40)
    assert pinned.revision == "a" * 40                                        # task.model_revision wins over the pin
    local = resolve_paper_instrument(str(tmp_path), SST, "VADER")
    assert (local.model_id, local.revision, local.status) == (str(tmp_path), None, "given")
    assert probe.calls == []


def test_the_real_probe_reads_the_hub_answer(monkeypatch):
    "hub_revision_status itself, with HfApi.model_info replaced: verified only for the exact sha; hub errors are named."
    import huggingface_hub
    from huggingface_hub.utils import RevisionNotFoundError
    from types import SimpleNamespace
    class Gone(RevisionNotFoundError):
        def __init__(self): Exception.__init__(self, "no such revision")   # (the real constructor wants an HTTP response)
    answers = {"ok": lambda *a, **k: SimpleNamespace(sha="f" * 40), "other": lambda *a, **k: SimpleNamespace(sha="0" * 40),
               "down": lambda *a, **k: (_ for _ in ()).throw(ConnectionError("no route")),
               "gone": lambda *a, **k: (_ for _ in ()).throw(Gone())}
    for case, want in (("ok", "verified"), ("other", "unknown revision"), ("down", "unreachable (ConnectionError)"), ("gone", "unknown revision")):
        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", answers[case])
        assert text.hub_revision_status("org/m", "f" * 40) == want, case


def test_an_offline_auto_run_says_in_its_report_which_instrument_it_used(tmp_path):
    "The narratives study on 32 committed SmolLM2 stories with sentiment_model: auto under HF_HUB_OFFLINE: VADER, and the report says why."
    store = tmp_path/"store"; shutil.copytree(ROOT/"store"/"narratives", store/"narratives")
    shutil.copy(ROOT/"params"/"narratives"/"_base-local.yaml", tmp_path)   # the run file includes it (its sentiment_model: auto)
    p = tmp_path/"auto.yaml"
    p.write_text((ROOT/"params"/"narratives"/"smollm2-135m.yaml").read_text().replace("sentiment_model: null", "sentiment_model: auto")
                 + "sample:\n  n: 32\n")
    r = run_cli("run", p, "--reports-dir", tmp_path/"reports", "--no-index",
                env={"HF_HUB_OFFLINE": "1", "SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path/"reports"/"narratives"/"smollm2-135m"
    why = "hub not asked (HF_HUB_OFFLINE is set): stand-in (VADER), levels not comparable to the paper"
    inst = pd.read_csv(out/"instruments.csv")
    assert inst.instrument.str.startswith("VADER sentiment").any() and inst.note.fillna("").str.contains(why, regex=False).any()
    assert why in (tmp_path/"reports"/"narratives"/"smollm2-135m.html").read_text()
    prov = json.loads((out/"provenance.json").read_text())
    assert prov["task"]["sentiment_model"] == "auto" and prov["sentiment_resolution"]["model_id"] is None
    assert prov["sentiment_instrument"]["instrument"] == "vader" and prov["instruments"]["misses"] == 0   # read from the committed cache: no `auto` key
