"""STOP fine-tuning on CPU: SFT data (targets, split, assistant-only labels), a LoRA run on the tiny Llama whose loss falls,
and the adapter reloaded through HFBackend with its own identity (hence its own store keys)."""
import json, importlib
import numpy as np
import pandas as pd
import pytest
pytestmark = pytest.mark.colab_lane   # stack-sensitive, run by `make test-colab` only: peft/trl LoRA and QLoRA training on torch, and pandas splits: behaviour of the stack

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from silverspoon.core import ModelParams, GenerationParams, ParamsError, load_params
from silverspoon.engine.backends import GenRequest
from silverspoon.engine.backends.hf import HFBackend
from silverspoon.engine.store import request_key
from silverspoon.studies.stop.stop import load_stop, INSTRUCTION, stop_task
from silverspoon.studies.stop.stop_finetune import (ideal_answers, sft_dataset, split_by_progression, write_sft_jsonl, read_sft_jsonl,
                                               tokenize_chat, IGNORE_INDEX, load_finetune_params, train_lora, train_from_params,
                                               template_groups, sentence_groups, similarity_matrix, nearest_across, split_report)

SHORT = "Answer yes or no."   # the tiny model's scratch tokenizer spells STOP's long instruction out byte by byte


@pytest.fixture(scope="module")
def stop(): return load_stop()




@pytest.fixture(scope="module")
def small_sft(stop):
    df = sft_dataset("ideal", progressions=stop.iloc[::30], ask="until_no", instruction=SHORT)   # 15 short chats
    df["split"] = split_by_progression(df, 0.2, seed=0, progressions=stop)
    return df


def test_ideal_targets_and_format(stop):
    assert [ideal_answers(s) for s in ("low", "moderate", "high")] == [["yes"]*5, ["yes"] + ["no"]*4, ["no"]*5]
    df = sft_dataset("ideal", progressions=stop)
    assert df.groupby("severity").sensitivity.mean().to_dict() == {"high": 1.0, "low": 0.0, "moderate": 0.8}
    m = df.messages[0]
    assert m[0] == {"role": "user", "content": f"{INSTRUCTION}\n{stop.s1[0]}"}          # the study's chat format
    assert [x["content"] for x in m if x["role"] == "assistant"] == ["Yes", "No", "No", "No", "No", "No"]
    assert m[-2]["content"] == stop.counterfactual[0]


def test_split_has_no_leakage_and_is_seeded(stop, tmp_path):
    df = sft_dataset("ideal", progressions=stop)
    df["split"] = split_by_progression(df, 0.15, seed=3, progressions=stop)
    tr, va = df[df.split == "train"], df[df.split == "valid"]
    assert 0.1 < len(va)/len(df) < 0.2 and set(va.severity) == {"low", "moderate", "high"}
    sents = lambda d: {x["content"].replace(INSTRUCTION + "\n", "") for ms in d.messages for x in ms if x["role"] == "user"}
    assert not set(tr.progression_id) & set(va.progression_id) and not sents(tr) & sents(va)
    assert split_by_progression(df, 0.15, seed=3, progressions=stop).equals(df.split)
    paths = write_sft_jsonl(df, tmp_path, source="ideal")
    assert read_sft_jsonl(paths["valid"]) == va.messages.tolist()
    assert all(set(json.loads(l)) == {"messages"} for l in paths["train"].read_text().splitlines())


def _blocks(stop):
    "The release's structural seed key: within a demographic, consecutive runs of one progression per sub-demographic."
    pos = stop.groupby("demographic", sort=False).cumcount() // stop.groupby("demographic").sub_demographic.transform("nunique")
    return pd.Series((stop.demographic.astype(str) + "#" + pos.astype(str)).to_numpy(), index=stop.progression_id)


def test_template_groups_are_the_seed_blocks(stop):
    grp, blocks = template_groups(stop), _blocks(stop)
    assert grp.nunique() == blocks.nunique() == 90
    assert pd.crosstab(grp, blocks[grp.index]).gt(0).sum(axis=1).max() == 1        # one group = one block, and back
    assert pd.crosstab(blocks[grp.index], grp).gt(0).sum(axis=1).max() == 1
    sizes = grp.value_counts()
    assert sizes.value_counts().sort_index().to_dict() == {3: 20, 4: 30, 5: 10, 7: 20, 8: 10} and sizes.max() <= 8   # no collapse
    assert grp["stop-001"] == grp["stop-002"] and grp["stop-315"] == grp["stop-321"]
    # every exact-sentence group lies inside one template group
    assert pd.crosstab(sentence_groups(stop), grp).gt(0).sum(axis=1).max() == 1
    sev = stop.set_index("progression_id").severity
    assert sev.groupby(grp).nunique().eq(1).all()


@pytest.mark.parametrize("fraction,seed", [(0.1, 0), (0.15, 3), (0.3, 7)])
def test_split_cross_similarity_below_threshold(stop, fraction, seed):
    df = sft_dataset("ideal", progressions=stop)
    df["split"] = split_by_progression(df, fraction, seed=seed, progressions=stop)
    side = df.set_index("progression_id").split
    near = nearest_across(stop, side)
    assert len(near) == (side == "valid").sum() > 0
    assert near.jaccard.max() < 0.5                                                  # the guarantee
    # checked independently of `nearest_across`: the full matrix, train rows x valid columns
    sim = similarity_matrix(stop)
    v = stop.progression_id.map(side).eq("valid").to_numpy()
    assert sim[np.ix_(~v, v)].max() == pytest.approx(near.jaccard.max())
    grp = template_groups(stop)
    assert df.groupby(df.progression_id.map(grp)).split.nunique().eq(1).all()       # whole templates
    # stratified by severity: round(fraction * templates of that severity) templates of each held out
    va_groups = df[df.split == "valid"].progression_id.map(grp).unique()
    sev = stop.set_index("progression_id").severity
    n_sev = sev.groupby(grp).first().value_counts()
    assert pd.Series(sev[list(va_groups)].to_numpy()).value_counts().to_dict() == {k: int(round(fraction*n)) for k, n in n_sev.items() if round(fraction*n)}
    # seeded: same seed same split, another seed another split
    assert split_by_progression(df, fraction, seed=seed, progressions=stop).equals(df.split)
    assert not split_by_progression(df, fraction, seed=seed + 1, progressions=stop).equals(df.split)
    rep = split_report(stop, side)
    assert rep["n_groups"] == 90 and rep["group_sizes"] == {3: 20, 4: 30, 5: 10, 7: 20, 8: 10} and rep["max_cross_split_jaccard"] < 0.5


def test_split_on_a_subset_and_the_old_grouping_leaks(stop):
    sub = stop.sample(120, random_state=1).sort_index()
    df = sft_dataset("ideal", progressions=sub)
    df["split"] = split_by_progression(df, 0.2, seed=0, progressions=sub)
    assert nearest_across(sub, df.set_index("progression_id").split).jaccard.max() < 0.5
    # the grouping by shared sentences only leaves a sibling of nearly every held-out progression in training
    full = sft_dataset("ideal", progressions=stop)
    old = split_by_progression(full, 0.1, seed=0, progressions=stop, groups=sentence_groups(stop))
    near = nearest_across(stop, pd.Series(old.to_numpy(), index=full.progression_id))
    assert near.jaccard.median() > 0.8 and (near.jaccard >= 0.5).mean() > 0.9
    with pytest.raises(ParamsError, match="group_jaccard"): template_groups(stop, 0)
    with pytest.raises(ParamsError, match="group_jaccard"):
        load_finetune_params({"run": "x", "model": {"backend": "hf", "id": "m"}, "data": {"group_jaccard": 1.5}})


def test_human_answers_each_annotator(stop, tmp_path):
    rows = [dict(progression_id="stop-010", annotator="A", sentence_index=i+1, answer=a) for i, a in enumerate(["yes", "yes", "no"])]
    rows += [dict(progression_id="stop-010", annotator="B", sentence_index=i+1, answer="yes") for i in range(5)]
    rows += [dict(progression_id="stop-010", annotator=a, sentence_index="cf", answer="no") for a in "AB"]
    pd.DataFrame(rows).to_csv(tmp_path/"h.csv", index=False)
    each = sft_dataset("human", tmp_path/"h.csv", aggregate="each", progressions=stop)
    assert each.answers.tolist() == ["yynnn", "yyyyy"] and each.cf_answer.tolist() == ["no", "no"]
    maj = sft_dataset("human", tmp_path/"h.csv", progressions=stop)
    assert maj.answers.tolist() == ["yynnn"]          # ties (1 of 2 said yes) go to "no"
    with pytest.raises(ParamsError, match="human_labels"): sft_dataset("human", progressions=stop)


def test_assistant_only_labels(tiny, small_sft):
    tok = HFBackend(ModelParams(backend="hf", id=str(tiny))).tokenizer
    m = small_sft.messages.iloc[1]
    enc = tokenize_chat(tok, m)
    target = tok.decode([t for t, l in zip(enc["input_ids"], enc["labels"]) if l != IGNORE_INDEX])
    answers = [x["content"] for x in m if x["role"] == "assistant"]
    assert target == "".join(f"{a}<|im_end|>\n" for a in answers)
    assert enc["labels"][:5] == [IGNORE_INDEX]*5 and len(enc["labels"]) == len(enc["input_ids"]) == len(enc["attention_mask"])


def test_params_validation(tiny):
    p = load_finetune_params({"run": "x", "model": {"backend": "hf", "id": str(tiny)}})
    assert (p.train.learning_rate, p.train.batch_size, p.train.weight_decay, p.train.warmup_steps) == (1e-5, 4, 0.01, 100)
    with pytest.raises(ParamsError, match="unknown field `lora.rank`"):
        load_finetune_params({"run": "x", "model": {"backend": "hf", "id": "m"}, "lora": {"rank": 8}})
    with pytest.raises(ParamsError, match="remove it"):
        load_finetune_params({"run": "x", "model": {"backend": "hf", "id": "m", "adapter": "a"}})


def test_train_reload_generate(tiny, small_sft, tmp_path):
    p = load_finetune_params({"run": "t", "model": {"backend": "hf", "id": str(tiny)},
                              "train": {"learning_rate": 1e-2, "warmup_steps": 0, "max_steps": 10, "batch_size": 4}})
    tr, va = small_sft[small_sft.split == "train"], small_sft[small_sft.split == "valid"]
    res = train_lora(p, tr.messages.tolist(), va.messages.tolist(), tmp_path/"run")
    losses = res["log"].loss.dropna().tolist()
    assert res["steps"] == 10 and len(losses) == 10
    assert losses[-1] < losses[0], losses
    assert res["log"].eval_loss.notna().any() and (tmp_path/"run"/"train_log.csv").exists()
    adapter = res["adapter"]
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {f.name for f in adapter.iterdir()}
    cfg = json.loads((adapter/"adapter_config.json").read_text())
    assert set(cfg["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"} and cfg["r"] == 16

    base = HFBackend(ModelParams(backend="hf", id=str(tiny)))
    ft = HFBackend(ModelParams(backend="hf", id=str(tiny), adapter=str(adapter)))
    bi, fi = base.identity(), ft.identity()
    assert "adapter" not in bi and fi["adapter"] == str(adapter) and len(fi["adapter_sha256"]) == 64
    assert {k: v for k, v in fi.items() if not k.startswith("adapter")} == bi
    msgs = tr.messages.iloc[0][:1]
    g = GenerationParams(max_new_tokens=4)
    assert request_key(bi, "x", msgs, g) != request_key(fi, "x", msgs, g)
    reqs = [GenRequest(f"x{i}", m[:1]) for i, m in enumerate(tr.messages.head(3))]
    out_ft, out_base = ft.generate(reqs, g), base.generate(reqs, g)
    assert all(x.error is None and isinstance(x.text, str) for x in out_ft)
    assert [x.text for x in out_ft] != [x.text for x in out_base]
    # retraining changes the weights, hence the identity
    (adapter/"adapter_model.safetensors").write_bytes((adapter/"adapter_model.safetensors").read_bytes() + b" ")
    assert HFBackend(ModelParams(backend="hf", id=str(tiny), adapter=str(adapter))).identity()["adapter_sha256"] != fi["adapter_sha256"]


def test_train_from_params_writes_everything(tiny, tmp_path):
    r = train_from_params({"run": "tiny", "model": {"backend": "hf", "id": str(tiny)},
                           "data": {"n_progressions": 12, "valid_fraction": 0.25, "ask": "until_no", "instruction": SHORT},
                           "train": {"learning_rate": 1e-2, "warmup_steps": 0, "max_steps": 4}}, output_dir=tmp_path/"out", progress=False)
    out = tmp_path/"out"
    assert {"adapter", "data", "train_log.csv", "train_log.jsonl", "finetune_params.yaml", "eval_params.yaml", "run.json"} <= {f.name for f in out.iterdir()}
    man = json.loads((out/"data"/"manifest.json").read_text())
    assert man["splits"]["train"]["n_progressions"] + man["splits"]["valid"]["n_progressions"] == 12
    ev = load_params(out/"eval_params.yaml")
    assert ev.study == "stop" and ev.model.adapter == str((out/"adapter").resolve())
    t = stop_task(ev)
    assert (t.dialogue, t.ask, t.instruction_role) == ("chat", "until_no", "user")
    assert t.compare_base                                  # base vs adapter, paired, in the STOP report
    # the evaluation runs on the held-out progressions only, never on training ones
    valid, train = (set(man["splits"][k]["progression_ids"]) for k in ("valid", "train"))
    assert set(t.progression_ids) == valid and valid and not valid & train
    chk = man["split_check"]                               # and no training progression is a near-copy of a held-out one
    assert chk["threshold"] == 0.5 and chk["max_cross_split_jaccard"] < 0.5 and sum(chk["group_sizes"].values()) == chk["n_groups"]
    assert "Jaccard >= 0.5" in (out/"eval_params.yaml").read_text()
    assert r["steps"] == 4 and json.loads((out/"run.json").read_text())["n_train"] == r["n_train"]


def test_qlora_4bit_on_cpu(tiny, small_sft, tmp_path):
    try: importlib.import_module("bitsandbytes")
    except Exception as e: pytest.skip(f"bitsandbytes unavailable ({type(e).__name__}: {e})")
    p = load_finetune_params({"run": "q", "model": {"backend": "hf", "id": str(tiny), "quantization": "4bit"},
                              "train": {"learning_rate": 1e-2, "warmup_steps": 0, "max_steps": 3}})
    res = train_lora(p, small_sft.messages.tolist()[:8], None, tmp_path/"q")
    assert res["steps"] == 3 and res["log"].loss.notna().all()
    b = HFBackend(ModelParams(backend="hf", id=str(tiny), quantization="4bit", adapter=str(res["adapter"])))
    assert type(b.model.base_model.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    assert b.generate([GenRequest("a", small_sft.messages.iloc[0][:1])], GenerationParams(max_new_tokens=2))[0].error is None


def test_example_finetune_params_validate(root):
    from conftest import run_cli
    files = sorted((root/"params"/"examples"/"finetune").glob("*.yaml"))
    assert files, "params/examples/finetune/ holds no example"
    for f in files:
        r = run_cli("finetune", f, "--check")
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr
