"""The prompt-variant factor of every study that declares one (issue 22 part 3): the variants ask what the paper asks in other words
(the first is the paper's prompt, byte for byte as the committed runs sent it, so their store keys stand), replays cannot vary,
and the committed SmolLM2 runs' items.csv holds the units the factor bootstrap resamples. (Normative's: tests/test_studies_normative.py.)"""
import json
import pandas as pd
import pytest
from conftest import ROOT
from silverspoon.core import GenerationParams, ModelParams, ParamsError, RunParams, load_params
from silverspoon.engine.store import GenerationStore
from silverspoon.studies import PROMPT_VARIANT_KINDS, SYSTEM_MESSAGE_VARIANT, NEUTRAL_SYSTEM, get_study; from silverspoon.studies.stop import stop; from silverspoon.studies.letters import letters; from silverspoon.studies.silverspoon import professions as P, narratives as N
from silverspoon.engine.backends.scripted import ScriptedBackend


# ----------------------------------------------------------------------------------------------------
# STOP and letters (was tests/test_factors_stop_letters.py)
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
    system = [{"role": "system", "content": NEUTRAL_SYSTEM}] if variant == "system-message" else []
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
    assert [q.messages for q in reqs["system-message"]] == [[{"role": "system", "content": NEUTRAL_SYSTEM}, *m] for m in paper]
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


# ---------------------------------------------------------------- items.csv holds the units the factor bootstrap resamples
@pytest.mark.parametrize("study,run,n_items", [("stop", "smollm2-135m", 12), ("letters", "smollm2-135m-cbg", 8)])
def test_items_of_the_committed_smollm2_runs_resample_their_units(study, run, n_items):
    "The committed SmolLM2 run's items.csv holds one `item` per unit the factor bootstrap resamples (12 progressions, 8 twin pairs);"
    " that it gives back every card headline is checked for every study and run in tests/test_studies.py."
    out = ROOT/"reports"/study/run
    items, summary = pd.read_csv(out/"items.csv"), pd.read_csv(out/"summary.csv")
    assert items["item"].nunique() == n_items and items["item"].notna().all()
    if study == "stop":   # the bias contrast carries its test in summary.csv; the performance levels carry none
        s = summary[summary.parser.eq("faithful")].set_index("metric")
        assert s.loc["sensitivity high-low severity", "test"] == "two-group permutation over progressions" and s.loc["sensitivity high-low severity", "null"] == 0
        assert s.loc["sensitivity high-low severity", "n_units"] == 4 and pd.isna(s.loc["sensitivity high-low severity", "p"])   # 4 progressions a severity: too few
        assert s.loc[["P", "mean sensitivity"], "p"].isna().all() and s.loc["P", "ci_low"] < s.loc["P", "estimate"] < s.loc["P", "ci_high"]


# ----------------------------------------------------------------------------------------------------
# Professions and narratives (was tests/test_prompt_variants_silverspoon.py)
STUDIES = {"professions": (P.PROFESSION_PROMPTS, P.PROFESSION_PROMPT), "narratives": (N.NARRATIVE_PROMPTS, N.NARRATIVE_PROMPT)}


@pytest.mark.parametrize("study", STUDIES)
def test_prompt_variants_ask_what_they_declare(study):
    prompts, paper = STUDIES[study]
    s = get_study(study)
    assert list(prompts) == [v for v, (kind, _) in s.prompt_variants.items() if kind == "wording"] and next(iter(prompts.values())) == paper   # the reference: the paper's prompt
    assert s.prompt_variants["system-message"] == SYSTEM_MESSAGE_VARIANT["system-message"]   # the one declaration, not a copy
    kinds = [k for k, _ in s.prompt_variants.values()]
    assert kinds.count("wording") >= 3 and kinds.count("system_prompt") == 1 and set(kinds) <= set(PROMPT_VARIANT_KINDS)
    emma = P.demographic_items().query("prompt_id == 'Emma|Flint, Michigan'")
    base = dict(study=study, run="x", model=dict(backend="hf", id="m"), generation={}, sample={"n": 16})
    asked = {}
    for v in s.prompt_variants:
        t = s.validate(load_params({**base, "task": {"prompt_variant": v}}), "x.yaml")
        msgs = P.profession_requests(emma, *P.task_prompt(t, prompts, s.prompt_variants))[0].messages
        asked[v] = msgs
        assert "Emma" in msgs[-1]["content"] and "Flint, Michigan" in msgs[-1]["content"]
    assert asked[next(iter(prompts))] == [{"role": "user", "content": paper.format(name="Emma", city="Flint, Michigan")}]
    assert len({m[-1]["content"] for v, m in asked.items() if s.prompt_variants[v][0] == "wording"}) == 3   # three different wordings
    assert asked["system-message"] == [{"role": "system", "content": NEUTRAL_SYSTEM}] + asked[next(iter(prompts))]


def test_the_system_message_variant_is_declared_once():
    "Issue 53: every study whose paper sends no system message offers the one `SYSTEM_MESSAGE_VARIANT` (not a copy in its own words); normative's switches the authors' own system prompt and says so."
    from silverspoon.studies import all_studies
    offered = {s.name: s.prompt_variants.get("system-message") for s in all_studies() if "system-message" in s.prompt_variants}
    assert {"letters", "stop", "professions", "narratives", "normative"} <= set(offered)
    assert all(v == SYSTEM_MESSAGE_VARIANT["system-message"] for k, v in offered.items() if k != "normative"), offered
    assert "switched" in offered["normative"][1]
    import re
    for f in sorted((ROOT/"silverspoon"/"studies").rglob("*.py")):   # no study spells the variant's sentence again
        assert not re.search(r"after (an explicit )?a? ?neutral system message", f.read_text(encoding="utf-8")) or f.name == "__init__.py", f
