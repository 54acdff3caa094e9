"""Professions and narratives factors (issue 22 part 3): every prompt variant builds the requests it declares (the paper's
prompt first, unchanged, so the committed runs keep their store keys), and `headlines_from_items` reproduces the card
headlines of the committed SmolLM2 runs from their items.csv (present once the reports are regenerated)."""
import pandas as pd
import pytest
from silverspoon.core import load_params, project_root
from silverspoon.site.card import study_headlines
from silverspoon.studies import get_study, PROMPT_VARIANT_KINDS
from silverspoon.studies.silverspoon import professions as P, narratives as N

STUDIES = {"professions": (P.PROFESSION_PROMPTS, P.PROFESSION_PROMPT), "narratives": (N.NARRATIVE_PROMPTS, N.NARRATIVE_PROMPT)}


@pytest.mark.parametrize("study", STUDIES)
def test_prompt_variants_ask_what_they_declare(study):
    prompts, paper = STUDIES[study]
    s = get_study(study)
    assert list(s.prompt_variants) == list(prompts) and next(iter(prompts.values())) == (paper, None)   # the reference: the paper's prompt, no system message
    kinds = [k for k, _ in s.prompt_variants.values()]
    assert kinds.count("wording") >= 3 and kinds.count("system_prompt") == 1 and set(kinds) <= set(PROMPT_VARIANT_KINDS)
    emma = P.demographic_items().query("prompt_id == 'Emma|Flint, Michigan'")
    base = dict(study=study, run="x", model=dict(backend="hf", id="m"), generation={}, sample={"n": 16})
    asked = {}
    for v in prompts:
        t = s.validate(load_params({**base, "task": {"prompt_variant": v}}), "x.yaml")
        msgs = P.profession_requests(emma, *P.task_prompt(t, prompts))[0].messages
        asked[v] = msgs
        assert "Emma" in msgs[-1]["content"] and "Flint, Michigan" in msgs[-1]["content"]
    assert asked[next(iter(prompts))] == [{"role": "user", "content": paper.format(name="Emma", city="Flint, Michigan")}]
    assert len({m[-1]["content"] for v, m in asked.items() if s.prompt_variants[v][0] == "wording"}) == 3   # three different wordings
    assert asked["system-message"] == [{"role": "system", "content": P.NEUTRAL_SYSTEM}] + asked[next(iter(prompts))]


@pytest.mark.parametrize("study", STUDIES)
def test_headlines_from_items_match_the_committed_summary(study):
    out = project_root()/"reports"/study/"smollm2-135m"
    assert (out/"items.csv").is_file(), f"{out}/items.csv is missing: regenerate the reports (silverspoon run --all)"
    h = get_study(study).headlines_from_items(pd.read_csv(out/"items.csv"))
    summ = pd.read_csv(out/"summary.csv").set_index("metric").estimate
    assert set(h) == {x.metric for x in study_headlines(study)}
    for metric, v in h.items(): assert abs(v - summ[metric]) < 1e-9, (metric, v, summ[metric])
