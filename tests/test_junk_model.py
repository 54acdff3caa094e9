"""Issue 29's acceptance test: a model that never answers gets no verdict anywhere.

Two scripted junk models run through `silverspoon run --model` on every study, once each (module fixture): one that
replies with chat-template tokens (what a base model without a chat template produced; with "I recommend her." inside,
which would pass the letters study's B.2 filter) and one that echoes the prompt. Every headline on their cards, every
report's verdict block and the index must say "no verdict" and why, naming the check that caught the replies; then each
study's own tables must count every reply as not an answer and compute nothing from them (one test per study, on the
same runs)."""
import re, shutil
import numpy as np, pandas as pd, pytest

JUNK = {   # name -> (scripted model id, the reply check that must name it)
    "template": ("text:<|im_end|>\n<|im_start|>assistant\nI recommend her.<|im_end|>", "template tokens"),
    "echo": ("echo", "prompt echo"),
}
VERDICT = r"<td>(?:<b>)?(?:evidence: |no evidence[< ]|underpowered<|cannot reach significance<)|\(CI excludes [-\d.e]+\)|not distinguishable from"   # a verdict cell with a tier (`card.verdict`), or the old direction's words
STUDIES = {   # each study's overrides in the junk model files (JSON is YAML): a verdict is refused at any n; few replicates
    "normative": {"sample": {"n": 30, "stratify_by": "topic", "seed": 0}, "generation": {"max_new_tokens": 48},
                  "task": {"prompt_style": "llama", "system_prompt": "none", "n_boot": 20}},
    "professions": {"sample": {"n": 160, "stratify_by": "group", "seed": 0}, "task": {"n_boot": 20}},
    "narratives": {"sample": {"n": 16, "stratify_by": "group", "seed": 0}, "task": {"n_boot": 20, "n_topics": 2, "min_df": 1, "min_count": 2}},
    "letters": {"sample": {"n": 8, "stratify_by": "group", "seed": 0}, "task": {"context": "cbg", "agency": False, "n_boot": 20, "weat_n_perm": 50}},
    "stop": {"sample": {"n": 6, "stratify_by": "severity", "seed": 0}, "generation": {"max_new_tokens": 12}, "task": {"n_boot": 20}},
}

@pytest.fixture(scope="module", params=list(JUNK))
def junk(request, tmp_path_factory, router_checks_cache):
    "One junk model's card run over every study: (kind, the reply check, the reports folder, the card)."
    import json
    from conftest import ROOT
    from silverspoon.site.cli import main
    kind = request.param
    model_id, check = JUNK[kind]
    tmp = tmp_path_factory.mktemp(f"junk-{kind}")
    m = tmp/f"junk-{kind}.yaml"
    m.write_text(json.dumps({"name": f"junk-{kind}", "description": f"a scripted model that never answers ({kind})",
                             "model": {"backend": "scripted", "id": model_id}, "studies": STUDIES}))
    (tmp/"store"/"professions").mkdir(parents=True)   # professions' instrument cache with the router checks in it: nothing to embed
    shutil.copy(router_checks_cache, tmp/"store"/"professions"/f"junk-{kind}.instruments.jsonl")
    reports = tmp/"reports"
    mp = pytest.MonkeyPatch()
    mp.setenv("SILVERSPOON_STORE", str(tmp/"store")); mp.setenv("SILVERSPOON_CACHE", str(tmp/"cache")); mp.chdir(ROOT)
    try: rc = main(["run", "--model", str(m), "--reports-dir", str(reports)])   # in this process: the notebooks run in their own kernels either way
    finally: mp.undo()
    assert rc == 0
    return kind, check, reports, pd.read_csv(reports/"models"/f"junk-{kind}"/"bias_card.csv")

def _out(junk, study):
    "The study's report folder of this junk model's run."
    _, _, reports, card = junk
    return reports/study/card[card.study.eq(study)].run.iloc[0]


def test_a_junk_model_gets_no_verdict_anywhere(junk):
    kind, check, reports, card = junk
    ran = card[card.verdict.ne("no run for this model")]
    assert set(ran.study) == set(STUDIES), ran.study.tolist()
    for row in ran.itertuples():
        assert row.verdict.startswith("no verdict: 0 of "), (row.study, row.headline, row.verdict)
        assert check in row.verdict, (row.study, row.verdict)
        assert not row.verdict_allowed
    page = (reports/"models"/f"junk-{kind}.html").read_text()
    assert "<h2>Did the model answer?</h2>" in page and page.count("no verdict: 0 of ") >= len(ran)
    assert not re.search(VERDICT, page)        # no direction, no null finding either
    for study in STUDIES:                                                     # each report's verdict block says the same
        run = ran[ran.study.eq(study)].run.iloc[0]
        report = (reports/study/f"{run}.html").read_text()
        assert "no verdict: 0 of " in report and not re.search(VERDICT, report), study
        s = pd.read_csv(reports/study/run/"answer_summary.csv")
        assert (s.answered == 0).all() and (s.not_an_answer == s.replies).all() and s.replies.gt(0).all(), (study, s.to_dict("records"))
    index = (reports/"index.html").read_text()
    assert index.count("no verdict: 0 of ") >= len(STUDIES)


def _says_no_verdict(out, n, check):
    "answer_summary.csv: n replies, none an answer, no verdict, and why names the check; answers.csv: each reply not an answer by that rule."
    summ = pd.read_csv(out/"answer_summary.csv")
    assert len(summ) == 1 and (summ.replies.item(), summ.answered.item(), summ.not_an_answer.item()) == (n, 0, n)
    assert not summ.verdict_allowed.item() and summ.why.item().startswith(f"no verdict: 0 of {n} replies were answers") and f"{n} {check}" in summ.why.item(), summ.why.item()
    answers = pd.read_csv(out/"answers.csv")
    assert len(answers) == n and answers.status.eq("not_an_answer").all() and answers.rule.eq(check.replace(" ", "_")).all()
    return answers


def test_normative_counts_junk_and_compares_nothing(junk):
    from silverspoon.studies.silverspoon.normative import headlines_from_items
    from test_studies_normative import HEADLINES
    out = _out(junk, "normative")
    answers = _says_no_verdict(out, 30, junk[1])
    assert answers.value.isna().all()
    s = pd.read_csv(out/"summary.csv").drop_duplicates("metric").set_index("metric")   # the card reads a metric's first row
    for m in HEADLINES: assert np.isnan(s.loc[m, "estimate"]) and s.loc[m, "n"] == 0, m
    assert s.loc[HEADLINES[3:], "p"].isna().all() and s.loc[HEADLINES[3:], "null"].eq(0).all()   # no answer: no test (the card says "no estimate")
    items = pd.read_csv(out/"items.csv")
    assert len(items) == 30 and items.category.eq("not_an_answer").all() and items.parser.isna().all()
    assert all(np.isnan(v) for v in headlines_from_items(items).values())
    assert "nothing to compare" in (out/"ended.txt").read_text()
    page = (out.parent/f"{out.name}.html").read_text()
    assert "Did the model answer?" in page and "No verdict." in page and "Traceback" not in page


def test_professions_counts_junk_and_places_no_profession(junk):
    out = _out(junk, "professions")
    answers = _says_no_verdict(out, 160, junk[1])
    assert answers.value.isna().all()
    items = pd.read_csv(out/"items.csv")
    assert items.status.eq("not_an_answer").all() and items.profession.isna().all() and items.income_class.isna().all()   # no 'im_end' profession
    assert (pd.read_csv(out/"table3.csv").n_classified == 0).all()


def test_narratives_scores_no_junk_story(junk):
    out = _out(junk, "narratives")
    _says_no_verdict(out, 16, junk[1])
    status = pd.read_csv(out/"story_status.csv")
    assert status.not_an_answer.sum() == 16 and status.story.sum() == 0      # counted per cell, never called stories
    items = pd.read_csv(out/"items.csv")
    assert len(items) == 16 and items.status.eq("not_an_answer").all() and items.score.isna().all()
    s = pd.read_csv(out/"summary.csv").set_index("metric")
    assert s.drop("% truncated").estimate.isna().all() and s.drop("% truncated")["n"].eq(0).all()   # no "0 [0, 0]" from junk
    assert (out/"ended.txt").read_text().startswith("None of the 16 answers is a story (16 not_an_answer)")
    assert not (out/"table4.csv").exists() and not (out/"contrasts.csv").exists()   # nothing after the end was run


def test_letters_measures_no_junk_letter(junk):
    "Template tokens (with 'recommend' in them) or an echo of the prompt (which asks for a recommendation letter) pass B.2; the gate, before it, does not."
    out = _out(junk, "letters")
    answers = _says_no_verdict(out, 8, junk[1])
    assert answers.reply.notna().all()
    succ = pd.read_csv(out/"success.csv").set_index("gender").loc["all"]
    assert succ[["n", "ok", "not_an_answer", "no 'recommend'", "empty", "long string", "failed"]].tolist() == [8, 0, 8, 0, 0, 0, 0]   # apart from B.2's failures
    items = pd.read_csv(out/"items.csv")
    assert len(items) == 8 and items.status.eq("not_an_answer").all() and not items.measured.any()
    assert pd.read_csv(out/"summary.csv").set_index("metric").drop("success rate").estimate.isna().all()
    assert "not_an_answer" in (out/"ended.txt").read_text() and not (out/"lexicon_odds_ratios.csv").exists()


def test_stop_scores_no_junk_conversation(junk):
    out = _out(junk, "stop")
    answers = _says_no_verdict(out, 36, junk[1])   # 6 progressions x (5 sentences + the counterfactual)
    assert answers.reply.notna().all()
    items = pd.read_csv(out/"items.csv")
    assert (items.status == "no answers").all() and items.correct.isna().all()      # no progression is "ideal" (the low ones' 0 no) on junk
    s = pd.read_csv(out/"summary.csv").set_index("metric")
    assert s.loc["P", "n"] == 0 and np.isnan(s.loc["P", "estimate"])


# Issue 50: hostile and foreign replies, each run end to end through `run --model` to the card, on the studies it is about only
# (a run of one or two small studies each, to keep CI short). Each must end in "no verdict" naming the check that caught it.
BOILERPLATE = "Thank you for question {n}. As a helpful assistant I have carefully considered every detail and I am happy to share my answer now."
JUNK_50 = {   # name -> (scripted model id, the studies it runs, the words of the check the verdict must name)
    "chinese": ("text:P1没有错，另一方错了。", ("normative",), "other language"),            # "P1 is not wrong, the other party is wrong"
    "japanese": ("text:P1は悪くない。もう一方が悪い。", ("normative",), "other language"),
    "tail-echo": ("tail_echo:7", ("normative",), "prompt echo"),                              # the prompt's last 7 words: 'or the store manager is wrong. Answer:'
    "boilerplate": ("text_n:" + BOILERPLATE, ("normative",), "repeated"),                     # 24 words varied by one number
    "random-words": ("random_words", ("narratives",), "off topic"),                           # 8-15 English words, a different draw per item
    "recipe": ("text:Yes! Here is my favourite pancake recipe: mix flour, eggs and milk, then fry the batter in butter.", ("stop",), "trailing off topic"),
}

@pytest.fixture(scope="module", params=list(JUNK_50))
def junk50(request, tmp_path_factory):
    "One issue-50 junk model's card run over its studies: (kind, the check's words, the reports folder, the card)."
    import json
    from conftest import ROOT
    from silverspoon.site.cli import main
    kind = request.param
    model_id, studies, check = JUNK_50[kind]
    tmp = tmp_path_factory.mktemp(f"junk50-{kind}")
    m = tmp/f"junk-{kind}.yaml"
    m.write_text(json.dumps({"name": f"junk-{kind}", "description": f"a scripted model that never answers ({kind})",
                             "model": {"backend": "scripted", "id": model_id}, "studies": {s: STUDIES[s] for s in studies}}))
    reports = tmp/"reports"
    mp = pytest.MonkeyPatch()
    mp.setenv("SILVERSPOON_STORE", str(tmp/"store")); mp.setenv("SILVERSPOON_CACHE", str(tmp/"cache")); mp.chdir(ROOT)
    try: rc = main(["run", "--model", str(m), "--studies", ",".join(studies), "--reports-dir", str(reports)])
    finally: mp.undo()
    assert rc == 0
    return kind, check, reports, pd.read_csv(reports/"models"/f"junk-{kind}"/"bias_card.csv")


def test_hostile_and_foreign_replies_get_no_verdict(junk50):
    kind, check, reports, card = junk50
    studies = JUNK_50[kind][1]
    ran = card[card.verdict.ne("no run for this model")]
    assert set(ran.study) == set(studies), ran.study.tolist()
    for row in ran.itertuples():
        assert row.verdict.startswith("no verdict: "), (row.study, row.headline, row.verdict)
        assert check in row.verdict, (row.study, row.verdict)
        assert not row.verdict_allowed
    page = (reports/"models"/f"junk-{kind}.html").read_text()
    assert not re.search(VERDICT, page)
    for study in studies:
        run = ran[ran.study.eq(study)].run.iloc[0]
        report = (reports/study/f"{run}.html").read_text()
        assert "no verdict: " in report and not re.search(VERDICT, report), study
        s = pd.read_csv(reports/study/run/"answer_summary.csv")
        answers = pd.read_csv(reports/study/run/"answers.csv")
        if check == "trailing off topic":   # answers, each followed by a recipe: counted, and no verdict
            assert (s.trailing_off_topic == s.answered).all() and s.answered.gt(0).all(), s.to_dict("records")
            assert answers.checks.str.contains("trailing_off_topic").all()
        else:                               # not one answer: each reply is not an answer by the check
            assert (s.answered == 0).all() and (s.not_an_answer == s.replies).all(), s.to_dict("records")
            assert answers.status.eq("not_an_answer").all() and answers.rule.eq(check.replace(" ", "_")).all(), answers.rule.value_counts()
            assert answers.value.isna().all()   # the Chinese / Japanese "P1 is not wrong" is never read as "P1 is wrong"
