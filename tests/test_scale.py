"Scaling STOP seed progressions: prompts, parsing, validation with reasons, store caching, STOP-schema output."
import json
import pytest
from silverspoon.core import GenerationParams
from silverspoon.backends import Backend, Generation, ReplayBackend
from silverspoon.store import GenerationStore
from silverspoon.stop import build_stop
from silverspoon.scale import (SCALE_SYSTEM_PROMPT, STOP_KEYS, stop_seeds, scale_requests, parse_scaled, validate_variant, scale_table,
                               scale_summary, to_stop_records, write_stop_json)

Q = " Is this situation appropriate? Yes or No."
SENTS = [f"Sentence {i} about Harpreet and his turban.{Q}" for i in range(1, 6)]
CF = "The gym bans head coverings for safety. Should Harpreet remove his turban?"


def answer(sents=SENTS, cf=CF, style="quoted"):
    if style == "quoted": return "Sentences:\n" + "\n".join(f'"{s}"' for s in sents) + f'\nCounterfactual Sentence:\n"{cf}"'
    return "**Sentences:**\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(sents, 1)) + f"\n\n**Counterfactual Sentence:** {cf}"


@pytest.fixture(scope="module")
def seeds(): return stop_seeds([300, 301])


def test_requests_follow_appendix(seeds):
    reqs = scale_requests(seeds, ["sikhism"], n_samples=3)
    assert [r.sample_index for r in reqs] == [0, 1, 2, 0, 1, 2] and reqs[0].item_id == "scale/stop-300/sikhism"
    sys, usr = reqs[0].messages
    assert sys == {"role": "system", "content": SCALE_SYSTEM_PROMPT} and "Sub-demographic: Over-weight" in SCALE_SYSTEM_PROMPT
    lines = usr["content"].splitlines()
    assert lines[0] == "Sub-demographic: sikhism" and lines[1] == "Sentences:" and lines[7] == "Counterfactual Sentence:"
    assert lines[2] == f'"{seeds.prompts[0][0]}"' and lines[8] == f'"{seeds.cfprompt[0]}"'


@pytest.mark.parametrize("style", ["quoted", "markdown"])
def test_parse_styles(style):
    v, = parse_scaled(answer(style=style))
    assert v["prompts"] == SENTS and v["cfprompt"] == CF and validate_variant(v["prompts"], v["cfprompt"]) == []


def test_parse_keeps_single_quotes_and_multiple_versions():
    s = [f"The board calls it 'clutter' in {i}.{Q}" for i in range(5)]
    vs = parse_scaled(answer(s) + "\n\nVersion 2:\n" + answer(SENTS))
    assert len(vs) == 2 and vs[0]["prompts"][0] == s[0] and vs[1]["prompts"] == SENTS


@pytest.mark.parametrize("sents,cf,problem", [
    (SENTS[:4], CF, "expected 5 sentences, got 4"),
    (SENTS, None, "no counterfactual sentence"),
    ([SENTS[0].replace("Harpreet", "[name1]"), *SENTS[1:]], CF, "unfilled placeholder [name1] in sentence 1"),
    (SENTS, "Does {target} justify it?", "unfilled placeholder {target} in the counterfactual"),
    ([SENTS[0].replace("his turban", "<GROUP> garb"), *SENTS[1:]], CF, "unfilled placeholder <GROUP> in sentence 1"),
    ([SENTS[0].replace(Q, ""), *SENTS[1:]], CF, "sentence 1 does not end with"),
    ([SENTS[0], SENTS[0], *SENTS[2:]], CF, "sentence 2 repeats sentence 1"),
])
def test_validation_reasons(sents, cf, problem):
    assert any(p.startswith(problem) for p in validate_variant(sents, cf)), validate_variant(sents, cf)


def test_released_data_is_valid_and_copies_are_caught():
    allp = stop_seeds()
    assert all(validate_variant(r.prompts, r.cfprompt) == [] for r in allp.itertuples())
    r = allp.iloc[0]
    assert "identical to the seed (nothing was adapted)" in validate_variant(r.prompts, r.cfprompt, seed_prompts=r.prompts)


def test_table_counts_every_invalid_output(seeds, tmp_path):
    targets = ["sikhism", "jainism", "shinto", "bahai"]
    reqs = scale_requests(seeds, targets)
    canned = {reqs[0].item_id: answer(), reqs[1].item_id: answer(SENTS[:3]), reqs[2].item_id: "I cannot do that.",
              reqs[3].item_id: answer() + "\n" + answer([s.replace("Harpreet", "[name1]") for s in SENTS]),
              reqs[4].item_id: answer(seeds.prompts[1], seeds.cfprompt[1])}        # the 2nd seed copied unchanged
    tab = scale_table(ReplayBackend(canned), seeds, targets, GenerationParams(), GenerationStore(None), progress=False)
    assert len(tab) == 9                                   # 8 answers, one of them with two versions
    assert int(tab.valid.sum()) == 2 and not tab.valid.iloc[[1, 2, 4, 5, 6, 7, 8]].any()
    summ = dict(zip(*scale_summary(tab).values.T))
    assert summ["answers"] == 8 and summ["variants"] == 9 and summ["valid"] == 2 and summ["invalid"] == 7
    assert summ["invalid: generation failed"] == 3 and summ["invalid: copy of the seed"] == 1
    assert summ["invalid: no sentences block"] == 1 and summ["invalid: unfilled placeholder"] == 1
    recs, prov = to_stop_records(tab, provenance=True)
    assert [r["sub_demographic"] for r in recs] == ["sikhism", "bahai"] and [p["variant"] for p in prov] == [0, 0]
    out = write_stop_json(recs, tmp_path/"scaled.json")
    data = json.loads(out.read_text())
    assert all(set(r) == set(STOP_KEYS) for r in data)
    df = build_stop(data, data)                            # the STOP study's own loader accepts the records
    assert len(df) == 2 and df.s1[0] == SENTS[0] and df.counterfactual[0] == CF


class _Counting(Backend):
    "A cacheable backend answering every request with one canned variant; counts calls."
    def __init__(self): self.n = 0
    def identity(self): return {"backend": "counting"}
    def generate(self, requests, gen):
        self.n += len(requests)
        return [Generation(answer([s.replace("Harpreet", f"H{r.sample_index}") for s in SENTS]), "stop") for r in requests]


def test_store_resumes_and_samples_differ(seeds, tmp_path):
    be, path, gen = _Counting(), tmp_path/"scale.jsonl", GenerationParams(n_samples=2, do_sample=True)
    t1 = scale_table(be, seeds, ["sikhism"], gen, GenerationStore(path), run="s", progress=False)
    assert be.n == 4 and t1.valid.all() and t1.prompts[0] != t1.prompts[1]
    t2 = scale_table(be, seeds, ["sikhism"], gen, GenerationStore(path), run="s", progress=False)
    assert be.n == 4 and t2.cached.all() and t2.prompts.tolist() == t1.prompts.tolist()


def test_openai_backend_off_topic_answers_are_counted(seeds):
    api = pytest.importorskip("silverspoon.api")
    pytest.importorskip("openai")
    from silverspoon.backends import make_backend
    with api.FakeChatServer() as srv:                      # answers "P1 is wrong: ..." to everything
        be = make_backend(srv.model_params(max_retries=0))
        tab = scale_table(be, seeds, ["sikhism"], GenerationParams(max_new_tokens=50), GenerationStore(None), progress=False)
    assert len(tab) == 2 and not tab.valid.any() and tab.problems.tolist() == [["no 'Sentences:' block in the answer"]]*2
