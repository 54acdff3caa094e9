"""Issue 29's acceptance test: a model that never answers gets no verdict anywhere.

Two scripted junk models run through `silverspoon run --model` on every study: one that replies with chat-template tokens
(what a base model without a chat template produced) and one that echoes the prompt. Every headline on their cards, every
report's verdict block and the index must say "no verdict" and why, naming the check that caught the replies."""
import re
import pandas as pd, pytest

JUNK = {   # name -> (scripted model id, the reply check that must name it)
    "template": ("text:<|im_end|>\n<|im_start|>assistant\n<|im_end|>", "template tokens"),
    "echo": ("echo", "prompt echo"),
}
VERDICT = r"<td>(?:<b>)?(?:evidence: |no evidence<|underpowered<)|\(CI excludes [-\d.e]+\)|not distinguishable from"   # a verdict cell with a tier (`card.verdict`), or the old direction's words
SMALL = {"normative": 12, "professions": 20, "narratives": 8, "letters": 8, "stop": 4}   # sample.n per study: a verdict is refused at any n

@pytest.mark.parametrize("kind", JUNK)
def test_a_junk_model_gets_no_verdict_anywhere(tmp_path, kind, cli):
    model_id, check = JUNK[kind]
    m = tmp_path/f"junk-{kind}.yaml"
    studies = "".join(f"  {s}: {{sample: {{n: {n}}}}}\n" for s, n in SMALL.items())
    m.write_text(f"name: junk-{kind}\ndescription: a scripted model that never answers ({kind})\n"
                 f"model: {{backend: scripted, id: {model_id!r}}}\nstudies:\n{studies}")
    reports = tmp_path/"reports"
    r = cli("run", "--model", m, "--reports-dir", reports, env={"SILVERSPOON_STORE": str(tmp_path/"store")})   # in this process: the notebooks run in their own kernels either way
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    card = pd.read_csv(reports/"models"/f"junk-{kind}"/"bias_card.csv")
    ran = card[card.verdict.ne("no run for this model")]
    assert set(ran.study) == set(SMALL), ran.study.tolist()
    for row in ran.itertuples():
        assert row.verdict.startswith("no verdict: 0 of "), (row.study, row.headline, row.verdict)
        assert check in row.verdict, (row.study, row.verdict)
        assert not row.verdict_allowed
    page = (reports/"models"/f"junk-{kind}.html").read_text()
    assert "<h2>Did the model answer?</h2>" in page and page.count("no verdict: 0 of ") >= len(ran)
    assert not re.search(VERDICT, page)        # no direction, no null finding either
    for study in SMALL:                                                     # each report's verdict block says the same
        run = ran[ran.study.eq(study)].run.iloc[0]
        report = (reports/study/f"{run}.html").read_text()
        assert "no verdict: 0 of " in report and not re.search(VERDICT, report), study
        s = pd.read_csv(reports/study/run/"answer_summary.csv")
        assert (s.answered == 0).all() and (s.not_an_answer == s.replies).all() and s.replies.gt(0).all(), (study, s.to_dict("records"))
    index = (reports/"index.html").read_text()
    assert index.count("no verdict: 0 of ") >= len(SMALL)
