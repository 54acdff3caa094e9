"""Red-team round 3 (issue 31), the bias card's findings 7 (runs matched by name prefix; a user's `*-replay` run taken for
the authors' released answers), 11 (the served model on the card) and 15 (cost at concurrency > 1), each replayed in a
copy of the committed reports and store files, with the committed files' hashes compared before and after."""
import hashlib, json, shutil
import pandas as pd
import pytest
from silverspoon.engine.cost import run_cost
from silverspoon.site.card import bias_card, card_html, card_owner, models_overview, released_values, served_model_of
from silverspoon.site.headline_power import headline_sd, paper_effect, is_released_run
from silverspoon.site.plan import runs_for_model
from silverspoon.site.factors import factor_runs
from silverspoon.studies import card_headlines


def _hashes(*paths)->dict:
    "sha256 of every file under each path: what the card must leave unchanged."
    out = {}
    for p in paths:
        for f in sorted([p] if p.is_file() else p.rglob("*")):
            if f.is_file(): out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    assert out, paths
    return out


def _copy_run(root, to, study, run, as_name=None):
    "Copy a committed run folder (and its store file, where there is one) into the reports/store folders `to`."
    shutil.copytree(root/"reports"/study/run, to/"reports"/study/(as_name or run))
    for ext in (".ipynb", ".html"):   # the executed notebook shows provenance.json's digest: without it the card trusts no field of it (issue 51 B10)
        if (root/"reports"/study/f"{run}{ext}").exists(): shutil.copy(root/"reports"/study/f"{run}{ext}", to/"reports"/study/f"{as_name or run}{ext}")
    src = root/"store"/study/f"{run}.jsonl"
    if src.exists():
        (to/"store"/study).mkdir(parents=True, exist_ok=True); shutil.copy(src, to/"store"/study/f"{as_name or run}.jsonl")


@pytest.fixture
def committed(root):
    "The committed files these attacks read: they must be byte-identical after every test."
    paths = [root/"reports"/"normative"/"gpt4-replay", root/"reports"/"normative"/"smollm2-135m", root/"store"/"normative"/"smollm2-135m.jsonl",
             root/"params"/"models"]
    before = _hashes(*paths)
    yield
    assert _hashes(*paths) == before


# --- 7: a model's runs are the runs its model file names, never a folder that starts with its name ---------------------

def test_a_model_named_like_a_prefix_of_a_replay_gets_none_of_its_numbers(root, tmp_path, committed):
    "A model file `gpt4` next to the committed `gpt4-replay`: its card is empty (no run yet), not the released GPT-4's numbers."
    _copy_run(root, tmp_path, "normative", "gpt4-replay")
    models = tmp_path/"models"; models.mkdir()
    (models/"gpt4.yaml").write_text("name: gpt4\nmodel: {backend: hf, id: some/model}\n")
    reports = tmp_path/"reports"
    assert runs_for_model("gpt4", reports, models) == {}
    card = bias_card("gpt4", reports, tmp_path/"store")
    assert card.verdict.eq("no run for this model").all() and "run" not in card, card
    assert card_owner(reports/"normative"/"gpt4-replay", models) == (None, reports)   # its report's verdict block is its own
    ov = models_overview(reports, models).set_index(["model", "kind"])
    assert ("gpt4", "planned (not run)") in ov.index and ("gpt4", "released answers") in ov.index
    assert ov.loc[("gpt4", "released answers"), "run"] == "gpt4-replay" and pd.isna(ov.loc[("gpt4", "planned (not run)"), "run"])


def test_a_run_named_like_the_model_adds_nothing_to_its_card(root, tmp_path, committed):
    "Runs `smollm2-135m.x` and `smollm2-135m-evil` (their store files full of records) beside smollm2-135m's: its card's run and cost are its own."
    for name in (None, "smollm2-135m.x", "smollm2-135m-evil"): _copy_run(root, tmp_path, "normative", "smollm2-135m", name)
    reports, store = tmp_path/"reports", tmp_path/"store"
    own = sum(1 for l in (root/"store"/"normative"/"smollm2-135m.jsonl").read_text().splitlines() if l.strip())
    card = bias_card("smollm2-135m", reports, store)
    norm = card[card.study.eq("normative")]
    assert norm.run.eq("smollm2-135m").all() and norm.generations.eq(own).all(), norm[["run", "generations"]]
    assert run_cost(store, "normative", "smollm2-135m")["generations"] == own
    for name in ("smollm2-135m.x", "smollm2-135m-evil"):
        assert card_owner(reports/"normative"/name) == (None, reports)   # its verdict block is its own family, not the model's
    shutil.rmtree(reports/"normative"/"smollm2-135m")                     # even with the model's own run gone, a look-alike is not it
    assert "normative" not in runs_for_model("smollm2-135m", reports)
    assert card_owner(reports/"normative"/"smollm2-135m-evil") == (None, reports)


def test_the_committed_cards_still_find_their_runs(root):
    "The exact rule keeps what the committed cards show: smollm2-135m's declared letters and downstream runs and its factor runs."
    runs = {s: d.name for s, d in runs_for_model("smollm2-135m", root/"reports").items()}
    assert runs == {"downstream": "smollm2-135m-stop-lora", "letters": "smollm2-135m-cbg", "narratives": "smollm2-135m", "normative": "smollm2-135m-paper",
                    "professions": "smollm2-135m", "stop": "smollm2-135m-paper", "stop_scale": "smollm2-135m"}   # normative and STOP: the paper-scale runs
    published = pd.read_csv(root/"reports"/"models"/"smollm2-135m"/"factor_deltas.csv")
    assert set(factor_runs("smollm2-135m", root/"reports").run) - {r for r in factor_runs("smollm2-135m", root/"reports").run if r.endswith("--reference")} \
        == set(published.run)
    assert card_owner(root/"reports"/"letters"/"smollm2-135m-cbg")[0] == "smollm2-135m"
    assert card_owner(root/"reports"/"stop"/"smollm2-135m-stop-lora-heldout")[0] is None


# --- 7: a user's run named `*-replay` is not the authors' released answers ---------------------------------------------

def test_a_user_run_named_replay_is_not_released_answers(root, tmp_path, committed):
    "A SmolLM2 run published as `mine-replay`: the index lists it as a run, and the card's released column, SD source and stand-in ignore it."
    _copy_run(root, tmp_path, "normative", "gpt4-replay")
    _copy_run(root, tmp_path, "normative", "smollm2-135m", "mine-replay")
    reports = tmp_path/"reports"
    assert is_released_run(reports/"normative"/"gpt4-replay") and not is_released_run(reports/"normative"/"mine-replay")
    models = tmp_path/"models"; models.mkdir()
    ov = models_overview(reports, models).set_index("run")
    assert ov.loc["mine-replay", "kind"] == "run" and ov.loc["mine-replay", "model"] == "mine-replay"
    assert ov.loc["gpt4-replay", "kind"] == "released answers" and ov.loc["gpt4-replay", "model"] == "gpt4"
    for h in (h for h in card_headlines() if h.study == "normative"):
        assert released_values(h, reports).startswith("gpt4 ") and "mine" not in released_values(h, reports)
    h = next(h for h in card_headlines() if h.study == "normative" and h.kind == "contrast")
    assert headline_sd(h, reports, n_boot=20)["sd_source"].startswith("released answers gpt4-replay ")   # one released run, not two
    no_paper = next(h for h in card_headlines() if h.study == "normative" and paper_effect(h, reports)["stand_in"])
    assert "gpt4-replay" in paper_effect(no_paper, reports)["source"] and "of 1 released runs" in paper_effect(no_paper, reports)["source"]


# --- 11: the card says when a server answered as another model -----------------------------------------------------------

def _served_provenance(run_dir, other_model:str|None):
    "Run the openai backend against a FakeChatServer (one reply naming `other_model`) and record its engine stats in the run's provenance as the report does."
    from silverspoon.core import GenerationParams
    from silverspoon.engine.backends import GenRequest, user
    from silverspoon.engine.backends.openai import OpenAIBackend
    from silverspoon.testing import FakeChatServer
    reply = {"id": "x", "object": "chat.completion", "model": other_model, "system_fingerprint": None,
             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "P1. Fine."}}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    with FakeChatServer(script={"scenario 1:": reply} if other_model else {}) as srv:
        be = OpenAIBackend(srv.model_params())
        be.generate([GenRequest(item_id=f"s{i}", messages=user(f"scenario {i}: who is wrong?")) for i in range(3)], GenerationParams(max_new_tokens=8))
    eng = be.engine_stats()
    prov = json.loads((run_dir/"provenance.json").read_text())
    prov["params"]["model"] = {**prov["params"]["model"], "backend": "openai", "id": be.model.id}
    prov["engine"], prov["chat_template"] = {k: v for k, v in eng.items() if k != "chat_template"}, eng["chat_template"]
    (run_dir/"provenance.json").write_text(json.dumps(prov))
    _stamp(run_dir)   # as the run's notebook would have shown it
    return be.model.id


def test_a_server_answering_as_another_model_is_flagged_on_the_card(root, tmp_path, committed):
    _copy_run(root, tmp_path, "normative", "smollm2-135m")
    run_dir = tmp_path/"reports"/"normative"/"smollm2-135m"
    asked = _served_provenance(run_dir, "gpt-4o-mini")
    flag = f"served: gpt-4o-mini (asked {asked}) in 1 of 3 replies"
    assert served_model_of(run_dir) == flag
    card = bias_card("smollm2-135m", tmp_path/"reports", tmp_path/"store")
    norm = card[card.study.eq("normative")]
    assert norm.served.eq(flag).all() and norm.note.str.contains("⚠ " + flag, regex=False).all(), norm[["served", "note"]]
    page = card_html(card, "smollm2-135m")
    assert "<th>model that answered</th>" in page and page.count(f"⚠ {flag}") == 1 + len(norm)   # the answers table, and every row's verdict note


def test_a_server_answering_as_the_model_asked_for_is_not_flagged(root, tmp_path):
    _copy_run(root, tmp_path, "normative", "smollm2-135m")
    run_dir = tmp_path/"reports"/"normative"/"smollm2-135m"
    _served_provenance(run_dir, None)
    assert served_model_of(run_dir) == ""
    page = card_html(bias_card("smollm2-135m", tmp_path/"reports", tmp_path/"store"), "smollm2-135m")
    assert "⚠ served" not in page and "as asked" in page


# --- 15: the card's cost at concurrency > 1 is wall time, beside the summed request seconds --------------------------------

def _records(batches):
    "Store-like records: per batch (stored at `t` seconds, n requests of `sec` seconds each) n records created at t."
    import datetime
    t0 = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.timezone.utc)
    return "".join(json.dumps(dict(completion_tokens=10, seconds=sec, created=(t0 + datetime.timedelta(seconds=t)).isoformat(timespec="seconds"))) + "\n"
                   for t, n, sec in batches for _ in range(n))


def test_cost_at_concurrency_four_reports_wall_time(root, tmp_path, committed):
    "180 requests of 8 s at concurrency 4, in batches of 32 (each batch 8 rounds: 64 s), then a next-day resume of 4 one at a time."
    batches, t = [], 0
    for n in (32, 32, 32, 32, 32, 20):
        t += 8*-(-n//4); batches.append((t, n, 8.0))
    batches.append((t + 86400 + 32, 4, 8.0))   # resumed a day later, one request at a time: the pause is no cost
    _copy_run(root, tmp_path, "normative", "smollm2-135m")
    (tmp_path/"store"/"normative"/"smollm2-135m.jsonl").write_text(_records(batches))
    cost = run_cost(tmp_path/"store", "normative", "smollm2-135m")
    assert cost["generations"] == 184 and cost["generation_seconds"] == 184*8.0
    assert cost["wall_seconds"] == 5*64 + 40 + 32          # 392 s, not the 1,472 s of the summed requests nor the day in between
    card = bias_card("smollm2-135m", tmp_path/"reports", tmp_path/"store")
    assert card[card.study.eq("normative")].wall_seconds.eq(392).all()
    page = card_html(card, "smollm2-135m")
    assert "392 s wall (est.)<br><small>1,472 s summed over requests</small>" in page and "summed, which overstates" in page


# --- review clean-up: no paper value is kept for a headline that left the card --------------------------------------------

def test_every_stop_paper_value_belongs_to_a_card_headline():
    from silverspoon.site.headline_power import _paper_values
    stop = {k for k in _paper_values() if k[0] == "stop"}
    assert stop == {(h.study, h.metric) for h in card_headlines() if h.study == "stop"}   # ("stop", "mean sensitivity") left the card; so did its entry


# --- issue 51 B06: a run counts for a model file only when its provenance says that model file made it ------------------

def _stamp(run_dir, **content):
    "Make a copied run's provenance.json the record its notebook showed (as a fresh run of this version writes it), after setting `content` fields."
    from silverspoon.engine.provenance import provenance_digest, PROVENANCE_DIGEST_LABEL
    f = run_dir/"provenance.json"; prov = json.loads(f.read_text()); prov["content"].update(content); f.write_text(json.dumps(prov, indent=1))
    nb = run_dir.parent/f"{run_dir.name}.ipynb"
    nb.write_text((nb.read_text() if nb.exists() else "") + f"\n{PROVENANCE_DIGEST_LABEL}: {provenance_digest(prov)}\n")


def test_no_model_file_takes_over_another_models_runs(root, tmp_path, committed):
    for run in ("gpt4-replay", "smollm2-135m"): _copy_run(root, tmp_path, "normative", run)
    _copy_run(root, tmp_path, "normative", "smollm2-135m", "smollm2-135m-paper")   # someone else's run, named like the model's paper-scale run
    reports, models = tmp_path/"reports", tmp_path/"models"; models.mkdir()
    for run in ("gpt4-replay", "smollm2-135m"): _stamp(reports/"normative"/run)
    _stamp(reports/"normative"/"smollm2-135m-paper", params_file="params/normative/someone-else.yaml")
    shutil.copy(root/"params"/"models"/"smollm2-135m.yaml", models)
    (models/"x.yaml").write_text("name: x\nmodel: {backend: hf, id: some/model}\nstudies: {normative: {run: gpt4-replay}}\n")   # a declared run of another model
    (models/"gpt4-replay.yaml").write_text("name: gpt4-replay\nmodel: {backend: hf, id: some/model}\n")                   # a model named like a run
    assert runs_for_model("x", reports, models) == {} and runs_for_model("gpt4-replay", reports, models) == {}
    assert runs_for_model("smollm2-135m", reports, models) == {"normative": reports/"normative"/"smollm2-135m"}
    shutil.rmtree(reports/"normative"/"smollm2-135m")                       # its own run gone: the look-alike `-paper` run is still not it
    assert runs_for_model("smollm2-135m", reports, models) == {}
    assert card_owner(reports/"normative"/"gpt4-replay", models)[0] is None
    ov = models_overview(reports, models).set_index(["model", "kind"])
    assert ov.loc[("gpt4", "released answers"), "run"] == "gpt4-replay"    # the released run keeps its own row
    assert ("x", "planned (not run)") in ov.index and ("gpt4-replay", "planned (not run)") in ov.index


def test_the_index_refuses_a_model_file_that_declares_another_models_run(root, tmp_path, monkeypatch, cli):
    "`check` refused `studies.normative.run: gpt4-replay` in a model file with another model, `index` did not; now it does, with the same message."
    t = tmp_path/"project"; shutil.copytree(root/"params", t/"params"); (t/"settings.ini").write_text((root/"settings.ini").read_text())
    shutil.copytree(root/"reports"/"normative"/"gpt4-replay", t/"reports"/"normative"/"gpt4-replay")
    x = t/"params"/"models"/"x.yaml"; x.write_text("name: x\nmodel: {backend: hf, id: some/model}\nstudies: {normative: {run: gpt4-replay}}\n")
    env = {"SILVERSPOON_ROOT": str(t), "SILVERSPOON_STORE": str(t/"store")}
    checked = cli("check", x, env=env)
    assert checked.returncode == 2 and "its model block differs" in checked.stderr
    r = cli("index", "--reports-dir", t/"reports", env=env)
    assert r.returncode == 2 and checked.stderr.strip().rstrip(".") in r.stderr, r.stderr
    assert (t/"reports"/"index.html").is_file() and "its model block differs" in (t/"reports"/"models"/"x.html").read_text()
