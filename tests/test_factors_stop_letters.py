"""Factors of STOP and letters (issue 22 part 3): the prompt variants ask what the paper asks in other words (the first one is
the paper's prompt, byte for byte as the committed runs sent it), replays cannot vary, and a run's items.csv gives back the
bias card's headlines of its summary.csv."""
import json, math, shutil
import pandas as pd
import pytest
from conftest import ROOT, run_cli
from silverspoon.site.card import study_headlines
from silverspoon.core import GenerationParams, ModelParams, ParamsError, RunParams
from silverspoon.engine.store import GenerationStore
from silverspoon.studies import PROMPT_VARIANT_KINDS, get_study
from silverspoon.studies.stop import stop; from silverspoon.studies.letters import letters
from silverspoon.testing import ScriptedBackend


def _records(path):
    return [json.loads(l) for l in (ROOT/path).read_text().splitlines() if l.strip()]


@pytest.fixture(scope="module")
def stop_data(): return stop.load_stop()


# ---------------------------------------------------------------- the declared variants
@pytest.mark.parametrize("study,kinds", [("stop", {"wording", "option_order", "system_prompt"}), ("letters", {"wording", "system_prompt"})])
def test_studies_declare_their_prompt_variants(study, kinds):
    "The paper's prompt first, at least two rewordings, an option-order variant where the prompt lists options, a system-prompt variant."
    v = get_study(study).prompt_variants
    assert next(iter(v)) == "paper" and v["paper"][0] == "wording"
    assert sum(k == "wording" for k, _ in v.values()) >= 3 and {k for k, _ in v.values()} == kinds <= set(PROMPT_VARIANT_KINDS)
    task = get_study(study).task
    assert task().prompt_variant == "paper"   # the default is the reference level


# ---------------------------------------------------------------- STOP: the paper's variant is what the committed run sent
def test_stop_paper_variant_replays_the_committed_conversations(stop_data):
    "Re-asking the committed SmolLM2 run with its own answers gives byte-identical messages, turn by turn (so its store keys stay)."
    recs = _records("store/stop/smollm2-135m.jsonl")
    by_id = {r["item_id"]: r for r in recs}
    ids = sorted({r["item_id"].split("/")[0] for r in recs})
    backend = ScriptedBackend({k: r["answer"] for k, r in by_id.items()}, batch_size=12)
    items = stop_data[stop_data.progression_id.isin(ids)]
    res = stop.run_conversations(backend, items, GenerationParams(max_new_tokens=12), GenerationStore(None), "x", stop.StopTask(), progress=False)
    assert len(res) == len(recs) == 72
    for q in backend.requests: assert q.messages == by_id[q.item_id]["messages"], q.item_id


@pytest.mark.parametrize("variant", list(stop.PROMPT_VARIANTS))
def test_stop_variant_changes_only_the_instruction(stop_data, variant):
    items = stop_data.head(2)
    paper, other = ScriptedBackend("Yes."), ScriptedBackend("Yes.")
    gen = GenerationParams(max_new_tokens=12)
    stop.run_conversations(paper, items, gen, GenerationStore(None), "p", stop.StopTask(), progress=False)
    res = stop.run_conversations(other, items, gen, GenerationStore(None), "v", stop.StopTask(prompt_variant=variant), progress=False)
    assert (res.label_faithful == "yes").all() and len(res) == len(paper.requests) == len(other.requests) == 12
    system = [{"role": "system", "content": stop.NEUTRAL_SYSTEM}] if variant == "system-message" else []
    for a, b in zip(paper.requests, other.requests):
        want = [dict(m) for m in a.messages]
        want[0]["content"] = want[0]["content"].replace(stop.INSTRUCTION, stop.INSTRUCTIONS[variant], 1)
        assert b.messages == system + want
    first = other.requests[0].messages[-1]["content"]
    assert first.startswith(stop.INSTRUCTIONS[variant]) and first.endswith(items.s1.iloc[0])
    if variant == "option-order": assert "'no' or 'yes'" in first and "'yes' or 'no'" not in first
    if variant in ("plain", "stepwise"): assert "'yes' or 'no'" in first and stop.INSTRUCTION not in first


def test_stop_variant_params_are_checked():
    p = lambda backend="hf", id=".", **task: RunParams(study="stop", run="x", model=ModelParams(backend=backend, id=id), task=task)
    assert stop.stop_task(p(prompt_variant="stepwise")).prompt_variant == "stepwise"
    with pytest.raises(ParamsError, match=r"x.yaml: field `task.prompt_variant` = 'polite' is not a prompt variant.*plain \(wording"):
        stop.stop_task(p(prompt_variant="polite"), "x.yaml")
    with pytest.raises(ParamsError, match="replay runs cannot vary it"):
        stop.stop_task(p("replay", "llama2-70b", dialogue="authors", prompt_variant="option-order"), "x.yaml")
    with pytest.raises(ParamsError, match="instruction_role: user"):
        stop.stop_task(p(instruction_role="system", prompt_variant="system-message"), "x.yaml")


# ---------------------------------------------------------------- letters
def test_letters_paper_variant_is_what_the_committed_run_sent():
    recs = _records("store/letters/smollm2-135m-cbg.jsonl")
    prompts = letters.letter_items(letters.LettersTask()).set_index("item_id").prompt
    assert len(recs) == 16
    for r in recs: assert r["messages"] == [{"role": "user", "content": prompts[r["item_id"]]}], r["item_id"]


@pytest.mark.parametrize("context", ["cbg", "clg"])
def test_letters_variants_write_the_same_letters_in_other_words(context):
    sample = dict(n=4, stratify_by="group" if context == "cbg" else "occupation", seed=0)
    items = {v: letters.letter_items(letters.LettersTask(context=context, prompt_variant=v), sample) for v in letters.PROMPT_VARIANTS}
    reqs = {v: letters.letter_requests(items[v], v) for v in letters.PROMPT_VARIANTS}
    paper = [q.messages for q in reqs["paper"]]
    assert paper == [q.messages for q in letters.letter_requests(letters.letter_items(letters.LettersTask(context=context), sample))]
    for v in letters.PROMPT_VARIANTS:
        assert [q.item_id for q in reqs[v]] == [q.item_id for q in reqs["paper"]]       # the same letters, twin pairs kept
    assert [q.messages for q in reqs["system-message"]] == [[{"role": "system", "content": letters.NEUTRAL_SYSTEM}, *m] for m in paper]
    for v in ("plain", "direct"):
        for q, it, was in zip(reqs[v], items[v].itertuples(), paper):
            text = q.messages[0]["content"]
            assert len(q.messages) == 1 and text != was[0]["content"] and it.occupation in text
            assert ("reference" in text or "recommendation" in text)
            if context == "cbg": assert text.endswith(it.info)   # template 0: the biography closes the prompt, as the paper's


def test_letters_variant_params_are_checked():
    p = lambda backend="hf", id="m", **task: RunParams(study="letters", run="x", model=ModelParams(backend=backend, id=id), task=task)
    assert letters.letters_task(p(prompt_variant="plain")).prompt_variant == "plain"
    with pytest.raises(ParamsError, match="x.yaml: field `task.prompt_variant` = 'option-order' is not a prompt variant"):
        letters.letters_task(p(prompt_variant="option-order"), "x.yaml")     # the letters prompts list no options
    for ctx in ("cbg", "clg"):
        with pytest.raises(ParamsError, match="replay runs cannot vary it"):
            letters.letters_task(p("replay", "chatgpt", context=ctx, prompt_variant="system-message"), "x.yaml")


# ---------------------------------------------------------------- items.csv gives back the card headlines
def _close(a, b): return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9


@pytest.mark.parametrize("study,run_file,n_items", [("stop", "params/stop/smollm2-135m.yaml", 12),
                                                    ("letters", "params/letters/smollm2-135m-cbg.yaml", 8)])
def test_items_give_back_the_card_headlines_of_the_committed_runs(tmp_path, study, run_file, n_items):
    "The committed SmolLM2 run, re-executed from a copy of its store: items.csv recomputes every card headline of summary.csv."
    run = run_file.rsplit("/", 1)[1][:-5]
    store = tmp_path/"store"/study
    store.mkdir(parents=True)
    for f in (ROOT/"store"/study).glob(f"{run}.*jsonl"): shutil.copy(f, store/f.name)
    r = run_cli("run", run_file, "--reports-dir", tmp_path/"reports", "--no-index", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = tmp_path/"reports"/study/run
    counts = pd.read_csv(out/"generation_counts.csv").iloc[0]
    assert counts.from_store == counts.requests                                        # nothing generated
    items, summary = pd.read_csv(out/"items.csv"), pd.read_csv(out/"summary.csv")
    assert items["item"].nunique() == n_items and items["item"].notna().all()
    got = get_study(study).headlines_from_items(items)
    heads = study_headlines(study)
    assert heads and set(got) >= {h.metric for h in heads}              # every card headline (a study may give a new contrast before the card lists it)
    where = {h.metric: h.where for h in heads}
    for metric, value in got.items():
        row = summary[summary.metric == metric]
        for col, val in where.get(metric, heads[0].where): row = row[row[col] == val]
        assert len(row) == 1 and _close(value, float(row.estimate.iloc[0])), (metric, value, row)
    if study == "stop":   # the bias contrast carries its test in summary.csv; the performance levels carry none
        s = summary.set_index("metric")
        assert s.loc["sensitivity high-low severity", "test"] == "two-group permutation over progressions" and s.loc["sensitivity high-low severity", "null"] == 0
        assert s.loc["sensitivity high-low severity", "n_units"] == 4 and pd.isna(s.loc["sensitivity high-low severity", "p"])   # 4 progressions a severity: too few
        assert s.loc[["P", "mean sensitivity"], "p"].isna().all() and s.loc["P", "ci_low"] < s.loc["P", "estimate"] < s.loc["P", "ci_high"]
