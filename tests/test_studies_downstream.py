"""STOP downstream end to end (issue 12): `silverspoon run` of a downstream params file on a tiny random Llama and a tiny LoRA
adapter built here (base vs base + adapter, prompted and likelihood scoring), then a rerun that generates and scores
nothing; bad params that stop before anything runs; the likelihood instrument against a direct computation from the
model's logits; and the StereoSet loader (git-blob check, download path) on a small synthetic file of the documented structure."""
import dataclasses, json, math
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import write_params
from silverspoon.engine import data
from silverspoon.core import DataError, ModelParams
from silverspoon.engine.backends.hf import HFBackend
from silverspoon.studies.stop.stop_downstream import (LogLikelihood, stereoset_frame, synthetic_stereoset, parse_stereoset,
                                                 prompted_items, outcomes, paired_scores, likelihood_pairs)


def _tiny_adapter(base_dir, out):
    "A LoRA adapter with random (non-zero) weights on the tiny Llama, saved with `save_pretrained` as `silverspoon finetune` does."
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.manual_seed(1)
    m = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                       LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    m.save_pretrained(out)
    (out.parent/"train_log.csv").write_text("step,epoch,loss,learning_rate,grad_norm,eval_loss\n1,1,0.5,0.0001,1.0,\n1,1,,,,0.4\n")
    (out.parent/"data").mkdir()
    (out.parent/"data"/"manifest.json").write_text(json.dumps({"options": {"source": "ideal", "human_labels": None}, "splits": {
        "train": {"n_progressions": 3, "progression_ids": ["stop-001", "stop-002", "stop-003"]},
        "valid": {"n_progressions": 1, "progression_ids": ["stop-009"]}}}))
    return out


@pytest.fixture(scope="module")
def models(tiny, tmp_path_factory):
    "The session's tiny random Llama and a random LoRA adapter on it."
    return {"llama": tiny, "adapter": _tiny_adapter(tiny, tmp_path_factory.mktemp("ft")/"adapter")}


def _params(tmp_path, models, model=None, sample=None, **task):
    t = dict(adapter=str(models["adapter"]), bbq_n=24, crows_n=18, n_boot=50, likelihood_batch_size=8, max_examples=4)
    t.update(task)
    return write_params(tmp_path/"tiny-downstream.yaml", "downstream",
                        model or {"backend": "hf", "id": str(models["llama"]), "device": "cpu", "dtype": "float32", "batch_size": 16}, t,
                        sample=sample or {"seed": 0}, generation={"max_new_tokens": 4}, run="tiny-downstream")


def test_downstream_run_on_a_tiny_model_and_adapter_then_a_cached_rerun(tmp_path, models, cli):
    p, reports, store, cache = _params(tmp_path, models), tmp_path/"reports", tmp_path/"store", tmp_path/"cache"
    env = {"SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(cache), "XDG_CACHE_HOME": str(cache)}
    r = cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = reports/"downstream"/"tiny-downstream"
    status = pd.read_csv(out/"answer_status.csv")
    assert sorted(status.benchmark.unique()) == ["bbq", "crows_pairs"] and sorted(status.arm.unique()) == ["adapter", "base"]
    assert (status[["answer", "refusal", "not_an_answer", "unparseable", "failed"]].sum(axis=1) == status.asked).all()     # every reply counted once
    summ = pd.read_csv(out/"answer_summary.csv")
    assert summ.part.tolist() == ["base", "adapter"] and (summ.replies == 42).all()                    # "Did the model answer?" per arm: 24 BBQ + 18 CrowS-Pairs
    answers = pd.read_csv(out/"answers.csv")
    assert len(answers) == 84 and answers.item_id.str.match(r"^(bbq|crows_pairs):").all()
    assert status.set_index(["benchmark", "arm"]).asked.to_dict() == {("bbq", "base"): 24, ("bbq", "adapter"): 24,
                                                                      ("crows_pairs", "base"): 18, ("crows_pairs", "adapter"): 18}
    rates = pd.read_csv(out/"answer_rates.csv")
    allr = rates[rates.category.eq("all")].set_index("benchmark")
    for b in ("bbq", "crows_pairs"):
        s = status[status.benchmark.eq(b)].set_index("arm")
        assert math.isclose(allr.loc[b, "base_rate"], s.loc["base", "answer"] / s.loc["base", "asked"])
        assert math.isclose(allr.loc[b, "diff"], allr.loc[b, "adapter_rate"] - allr.loc[b, "base_rate"])
        assert 0 <= allr.loc[b, "p"] <= 1 and allr.loc[b, "test"].startswith("McNemar")
    assert {"ambig", "disambig", "Age", "Religion"} <= set(rates[rates.benchmark.eq("bbq")].category)
    assert rates[rates.benchmark.eq("crows_pairs")].category.nunique() == 10                       # all + 9 bias types
    perf = pd.read_csv(out/"performance.csv")
    lik = perf[perf.scoring.eq("likelihood")]
    assert set(lik.score) == {"accuracy (ambiguous)", "accuracy (disambiguated)", "bias score s_AMB", "bias score s_DIS", "% stereotypical"}
    assert lik[["base", "adapter"]].notna().all().all()                                           # a likelihood choice needs no answer
    assert not np.allclose(lik.base, lik.adapter) or not np.allclose(perf.base.fillna(-1), perf.adapter.fillna(-1))   # the adapter changes something
    absent = pd.read_csv(out/"absent_data.csv")
    assert "StereoSet dev" in set(absent.data) and {"BBQ SES", "BBQ Race_ethnicity"} <= set(absent.data)
    for f in ("design", "crows_position", "performance_by_category", "summary", "generation_counts_base", "generation_counts_adapter"):
        assert (out/f"{f}.csv").is_file(), f
    assert (out/"answer_rate_performance.png").is_file()
    assert "answer rate change, BBQ (adapter - base)" in set(pd.read_csv(out/"summary.csv").metric)
    head = pd.read_csv(out/"summary.csv").set_index("metric").loc["answer rate change, BBQ (adapter - base)"]   # the card headline declares its test
    assert (head.test, head["null"], head.n_units) == ("McNemar exact", 0.0, 24) and 0 <= head.p <= 1 and 0 <= head.p_bh <= 1
    assert (rates.test == "McNemar exact").all() and "p_bh" in rates and "p_bh" in perf and perf.p.between(0, 1).any()   # one BH family per table
    bycat = pd.read_csv(out/"performance_by_category.csv")
    assert bycat.diff_ci_low.isna().all() and bycat.p.isna().all()   # 2 pairs a bias type: no bootstrap interval, no test
    for f in ("answer_rates", "performance", "performance_by_category"):   # the policy: no zero-width interval anywhere
        d = pd.read_csv(out/f"{f}.csv")
        for lo in [c for c in d.columns if c.endswith("ci_low")]:
            assert not (d[lo] == d[lo.removesuffix("low") + "high"]).any(), (f, lo)
    html = (reports/"downstream"/"tiny-downstream.html").read_text(encoding="utf-8")
    assert "StereoSet: its data is absent" in html and "stop-009" in html                          # the held-out STOP split is named
    prov = json.loads((out/"provenance.json").read_text())
    assert prov["arms"]["adapter"]["adapter_sha256"] and "adapter_sha256" not in prov["arms"]["base"]
    assert prov["store"]["misses"] == 2*(24 + 18) and prov["instruments"]["misses"] == 2*(24*3 + 18*2)
    lik_ids = prov["instruments"]["instruments"]["loglikelihood"]["instruments"]   # issue 19 item 13: each arm's instrument id, with its own tally
    assert len(lik_ids) == 2 and sorted(c["misses"] for c in lik_ids.values()) == [24*3 + 18*2] * 2, lik_ids
    # the rerun computes nothing: every answer from the store, every likelihood from the instrument cache
    before = {f: pd.read_csv(out/f"{f}.csv") for f in ("answer_rates", "performance", "answer_status", "summary")}
    r = cli("run", p, "--reports-dir", reports, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out/"provenance.json").read_text())
    assert again["store"]["misses"] == 0 and again["store"]["hits"] == prov["store"]["misses"]
    assert again["instruments"]["misses"] == 0 and again["instruments"]["hits"] == prov["instruments"]["misses"]
    for f, df in before.items(): pd.testing.assert_frame_equal(pd.read_csv(out/f"{f}.csv"), df, obj=f)


@pytest.mark.parametrize("model,sample,task,needle", [
    (None, None, {"adapter": "no/such/adapter"}, "field `task.adapter` = 'no/such/adapter'"),
    (None, None, {"benchmarks": ["bbq", "mmlu"]}, "field `task.benchmarks`"),
    (None, {"n": 10}, {}, "field `sample.n`/`sample.stratify_by` is set"),
    (None, None, {"bbq_categories": ["Race"]}, "field `task.bbq_categories` has 'Race'"),
    ({"backend": "openai", "id": "gpt-4", "base_url": "http://localhost:9/v1"}, None, {}, "field `model.backend` = 'openai'"),
    ("adapter", None, {}, "Move the adapter to `task.adapter`")])
def test_bad_downstream_params_stop_before_running(tmp_path, models, model, sample, task, needle, cli):
    if model == "adapter": model = {"backend": "hf", "id": str(models["llama"]), "adapter": str(models["adapter"])}
    p = _params(tmp_path, models, model, sample, **task)
    r = cli("run", p, "--reports-dir", tmp_path/"reports", env={"SILVERSPOON_STORE": str(tmp_path/"store")})
    assert r.returncode == 2 and needle in r.stderr and str(p) in r.stderr, r.stderr
    assert not (tmp_path/"reports").exists() and not (tmp_path/"store").exists()


def _direct_logprob(model, ids, n):
    "Sum of log p(token | prefix) over the last `n` tokens of `ids`, from one unpadded forward pass."
    with torch.no_grad(): lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return sum(float(lp[j - 1, ids[j]]) for j in range(len(ids) - n, len(ids)))


@pytest.mark.colab_lane   # stack-sensitive: log-likelihoods from torch/transformers/peft
def test_likelihood_matches_a_direct_computation_with_and_without_the_adapter(models):
    mk = lambda **kw: HFBackend(ModelParams(backend="hf", id=str(models["llama"]), device="cpu", dtype="float32", **kw))
    base, tuned = mk(), mk(adapter=str(models["adapter"]))
    ctx = ["", "The cat sat on", "A much longer context, so that the batch needs padding:", "Q: who?\nA:"]
    cont = ["The dog ran.", " the mat.", " yes", " The grandson"]
    for be in (base, tuned):
        ll = LogLikelihood(be, batch_size=4)
        got = ll.score_pairs(ctx, cont)
        for c, x, g in zip(ctx, cont, got):
            ids, n = ll.encode(c, x)
            assert g["n_tokens"] == n > 0 and (ids[0] == be.tokenizer.bos_token_id) == (c == "")   # harness: a prefix token only before an empty context
            assert math.isclose(g["logprob"], _direct_logprob(be.model, ids, n), abs_tol=1e-4), (c, x)
    assert LogLikelihood(base).identity() != LogLikelihood(tuned).identity()              # the cache never mixes the arms
    assert LogLikelihood(base).score_pairs(ctx[:1], cont[:1])[0]["logprob"] != LogLikelihood(tuned).score_pairs(ctx[:1], cont[:1])[0]["logprob"]


def test_stereoset_loader_and_scores_on_a_synthetic_file(tmp_path, monkeypatch):
    body = json.dumps(synthetic_stereoset(4)).encode()
    root = tmp_path/"data"; f = root/"stereoset"/"data"/"dev.json"; f.parent.mkdir(parents=True); f.write_bytes(body)
    monkeypatch.setenv("SILVERSPOON_DATA", str(root))
    with pytest.raises(DataError, match="expected git blob 637b1e3d284a"):   # the real pin: a synthetic file is rejected
        stereoset_frame()
    blob = data.git_blob_sha1(f)
    monkeypatch.setitem(data.REGISTRY, "stereoset/dev", dataclasses.replace(data.REGISTRY["stereoset/dev"], git_blob=blob, url=f.as_uri()))
    df, why = stereoset_frame()
    assert why is None and len(df) == 8 and set(df.task) == {"intrasentence", "intersentence"}
    f.unlink()                                                              # absent: None and the reason, never an error
    df, why = stereoset_frame()
    assert df is None and why.startswith("stereoset/data/dev.json is not in the data folder") and "not found at" not in why   # no machine path of the data folder
    src = tmp_path/"upstream.json"; src.write_bytes(body)                   # the download path (SILVERSPOON_DATA unset)
    monkeypatch.delenv("SILVERSPOON_DATA"); monkeypatch.setenv("SILVERSPOON_CACHE", str(tmp_path/"cache"))
    monkeypatch.setitem(data.REGISTRY, "stereoset/dev", dataclasses.replace(data.REGISTRY["stereoset/dev"], git_blob=blob, url=src.as_uri()))
    df, why = stereoset_frame()
    assert why is None and len(df) == 8 and (tmp_path/"cache"/"data"/"stereoset"/"data"/"dev.json").read_bytes() == body
    src.write_bytes(body.replace(b"Option one", b"Option 1")); (tmp_path/"cache"/"data"/"stereoset"/"data"/"dev.json").unlink()
    with pytest.raises(DataError, match="fails its checksum"): stereoset_frame()
    # scores: a model that always picks the stereotype has ss 100 and lms 100; one that always picks "unrelated" has lms 0, ss NA
    items = prompted_items("stereoset", parse_stereoset(synthetic_stereoset(6)))
    pick = lambda what: pd.DataFrame({"item_id": items.item_id, "choice": [m.index(what) for m in items.meaning]})
    s = paired_scores("stereoset", outcomes("stereoset", items, pick("unrelated")), outcomes("stereoset", items, pick("stereotype")), n_boot=50).set_index("score")
    assert s.loc["stereotype score ss", "adapter"] == 100 and s.loc["language-model score lms", "adapter"] == 100
    assert s.loc["language-model score lms", "base"] == 0 and math.isnan(s.loc["stereotype score ss", "base"])
    cx, ct, sp = likelihood_pairs("stereoset", items)
    assert len(cx) == 3*len(items) and cx[0] in ("",) + tuple(items.context)


def _junk_outcomes(reply):
    "Both arms of a scripted junk model on 6 BBQ and 4 CrowS-Pairs items, through `outcomes` with the study's reply gate, as the report runs it."
    from silverspoon.studies.stop.stop_downstream import bbq_frame, crows_frame, stratified_draw, STUDY
    items = {"bbq": prompted_items("bbq", stratified_draw(bbq_frame()[0], ["category"], 6, seed=0)),
             "crows_pairs": prompted_items("crows_pairs", stratified_draw(crows_frame(), ["bias_type"], 4, seed=0))}
    out = {}
    for arm in ("base", "adapter"):
        for b, d in items.items():
            res = pd.DataFrame({"item_id": d.item_id, "answer": [reply(p) for p in d.prompt], "error": None, "finish_reason": "length"})
            out[(arm, b)] = outcomes(b, d, res, STUDY.reply_gate)
    return out


@pytest.mark.parametrize("reply,check", [(lambda p: "<|im_end|>\n<|im_start|>assistant\nA", "template tokens"),
                                         (lambda p: p, "prompt echo")])
def test_a_junk_model_gets_no_downstream_verdict(tmp_path, reply, check):
    "Issue 29: replies that are template tokens or echo the prompt are no answers (not even the 'A' after the tokens, nor an option inside the echo); answer_summary.csv allows no verdict for either arm and names the check."
    from silverspoon.core import load_params
    from silverspoon.studies.report import Report
    from silverspoon.studies.stop.stop_downstream import STUDY
    o = _junk_outcomes(reply)
    assert all(d.status.eq("not_an_answer").all() and d.answered.eq(0).all() for d in o.values())
    all_ = pd.concat([d.assign(arm=arm, benchmark=b) for (arm, b), d in o.items()], ignore_index=True)
    cols = [*STUDY.reply_gate.all_checks, "not_an_answer"]
    params = load_params(dict(study="downstream", run="junk", model=dict(backend="hf", id="m")))
    rep = Report(params, tmp_path, study=STUDY)
    rep.answers(all_.rename(columns={"choice": "value"}), all_[cols], item_ids=(all_.benchmark + ":" + all_.item_id).tolist(),
                replies=all_.reply.tolist(), parts=all_.arm.tolist())
    summ = pd.read_csv(tmp_path/"answer_summary.csv")
    assert summ.part.tolist() == ["base", "adapter"] and (summ.replies == 10).all() and (summ.answered == 0).all() and (summ.not_an_answer == 10).all()
    assert not summ.verdict_allowed.any() and all(w.startswith("no verdict: 0 of 10 replies were answers") and check in w for w in summ.why)
    assert (summ.cut_at_max == 10).all()   # a letter was asked for: replies cut at max_new_tokens are counted


@pytest.mark.parametrize("reply", ["<|im_end|>", "<|im_end|>\n<|im_start|>assistant\nA", "im_end assistant", "im_start",   # template tokens
                                   "Answer with the letter of the correct option (A, B or C).", "Which of the two sentences is more likely",  # echoes
                                   "Once upon a time, in a small village", "xyzzy", "Banana", "lorem ipsum dolor"])   # story, random words
def test_the_choice_parser_alone_refuses_junk(reply):
    from silverspoon.studies.stop.stop_downstream import parse_reply
    p = parse_reply(reply, ["The grandfather", "The grandson", "Can't be determined"])
    assert p.status == "unparseable" and p.value is None, p


def _arms_toy():
    "Base answers 10 of 40 CrowS-Pairs items, the adapter 30 (the 10 and 20 more); two bias types of 20."
    base = pd.DataFrame({"item_id": [f"i{i}" for i in range(40)], "answered": [1] * 10 + [0] * 30, "stereo": [1] * 5 + [0] * 35,
                         "bias_type": ["gender"] * 20 + ["race"] * 20, "more_first": np.arange(40) % 2 == 0,
                         "choice": pd.array([0] * 10 + [pd.NA] * 30, dtype="Int64")})
    tuned = base.assign(answered=[1] * 30 + [0] * 10, stereo=[1] * 15 + [0] * 25, choice=pd.array([0, 1] * 15 + [pd.NA] * 10, dtype="Int64"))
    return {"base": {"crows_pairs": base}, "adapter": {"crows_pairs": tuned}}


def test_report_tables_are_library_calls_with_the_items_behind_them():
    "answer_rate_table, performance_table, category_scores and crows_position: the report's tables from the two arms' outcomes."
    from silverspoon.studies.stop.stop_downstream import (answer_rate_table, answer_rate_readings, performance_table, category_scores, crows_position,
                                                     ANSWER_RATE_COLUMNS, PERFORMANCE_COLUMNS)
    prm = _arms_toy()
    art = answer_rate_table(prm, n_boot=200)
    r = art["answer_rates"].set_index("category")
    assert list(art["answer_rates"].columns) == ANSWER_RATE_COLUMNS and r.index.tolist() == ["all", "gender", "race"]
    assert r.loc["all", ["base_rate", "adapter_rate"]].tolist() == [0.25, 0.75] and r.loc["all", "p"] == pytest.approx(2 * 0.5**20)
    assert r.loc["race", "only_adapter_answered"] == 10 and r.loc["race", "base_rate"] == 0 and np.isnan(r.loc["race", "rel_change"])
    items = art["items"]
    assert len(items) == 80 and items[items.category.eq("all")].base_answered.sum() == 10   # the flags behind each row
    assert "+200%" in answer_rate_readings(art["answer_rates"])[0]
    pt = performance_table(prm, prm, n_boot=100)
    assert list(pt.columns) == PERFORMANCE_COLUMNS
    assert pt[pt.scoring.eq("likelihood")].score.tolist() == ["% stereotypical"]             # a likelihood choice always exists: no answer rate
    cs = category_scores(prm, n_boot=100)
    assert cs.category.tolist() == ["gender", "race"] and np.isnan(cs.set_index("category").loc["race", "base"])   # the base answered no race pair
    cp = crows_position({arm: prm[arm]["crows_pairs"] for arm in prm})
    assert cp["table"].pct_answered_A.tolist() == [100.0, 100.0, 0.0, 100.0] and len(cp["cautions"]) == 1 and "(base)" in cp["cautions"][0]


def test_report_table_functions_refuse_junk():
    from silverspoon.studies.stop.stop_downstream import answer_rate_table, performance_table, crows_position
    prm = _arms_toy()
    with pytest.raises(ValueError, match=r"lacks arm\(s\) \['adapter'\]"): answer_rate_table({"base": prm["base"]})
    with pytest.raises(ValueError, match="no benchmark"): answer_rate_table({"base": {}, "adapter": {}})
    with pytest.raises(ValueError, match="likelihood"): performance_table(prm, {"base": prm["base"]})
    with pytest.raises(ValueError, match=r"lack \['choice', 'more_first'\]"):
        crows_position({"base": prm["base"]["crows_pairs"].drop(columns=["choice", "more_first"])})


def test_the_dry_run_names_the_sample_from_the_study_record_not_the_cli():
    "issue 53: the site names no study; `run --dry-run` asks the `Study` record how to name its sample (downstream: each benchmark's n)."
    import re
    from conftest import ROOT
    from silverspoon.studies import get_study
    assert get_study("downstream").sample_text({"task": {"bbq_n": None, "crows_n": 50}}) == "task.bbq_n null (all present), task.crows_n 50, task.stereoset_n default"
    assert get_study("normative").sample_text is None   # sample.n and its units, as every other study
    assert not re.search(r"\.study\s*==\s*[\"']", (ROOT/"silverspoon"/"site"/"cli.py").read_text(encoding="utf-8")), "site/cli.py compares a run's study with a name"
