"backend: vllm against a fake `vllm` module: engine and sampling arguments, prompts, store keys and resume, single- and multi-turn."
import json, sys
import pytest
from silverspoon.core import ModelParams, GenerationParams, ParamsError, SilverspoonError, load_params
from silverspoon.engine.backends import GenRequest, make_backend, user
from silverspoon.engine.backends.hf import HFBackend
from silverspoon.engine.store import GenerationStore, generate_all
from silverspoon.engine.backends.vllm import VLLMBackend, VLLM_AUTO_BATCH, request_seed
from silverspoon.testing import fake_vllm

pytest.importorskip("transformers")
from conftest import ROOT




@pytest.fixture
def fake(tiny):
    "A stand-in `vllm` module (silverspoon.testing.FakeVLLM) installed for one test."
    with fake_vllm(tiny) as m: yield m


QUESTIONS = ["Hi", "Is it acceptable to lie to a friend? Answer yes or no.", "A rich family bought a large house near the sea.", "ok"]
REQS = [GenRequest(f"n{i}", user(q)) for i, q in enumerate(QUESTIONS)]


def _ids(tiny, r):
    hb = HFBackend(ModelParams(backend="hf", id=str(tiny)))
    return hb.tokenizer(hb.render(r.messages), add_special_tokens=False)["input_ids"]


def test_engine_arguments_come_from_the_params(tiny, fake):
    be = VLLMBackend(ModelParams(backend="vllm", id=str(tiny), dtype="bfloat16", quantization="4bit", tensor_parallel_size=2,
                                 gpu_memory_utilization=0.7, max_model_len=2048, revision=None))
    be.generate(REQS[:1], GenerationParams(max_new_tokens=4))
    (eng,) = fake.engines
    assert eng.model == str(tiny)
    assert eng.kw == dict(revision=None, dtype="bfloat16", quantization="bitsandbytes", tensor_parallel_size=2, gpu_memory_utilization=0.7,
                          max_model_len=2048, seed=0)
    be.generate(REQS[1:2], GenerationParams(max_new_tokens=4))
    assert len(fake.engines) == 1                              # one engine for the backend's life


def test_single_turn_through_the_store_same_prompts_and_resume(tiny, fake, tmp_path):
    params = ModelParams(backend="vllm", id=str(tiny), batch_size="auto")
    be, g = VLLMBackend(params), GenerationParams(max_new_tokens=64)
    assert be.batch_size == VLLM_AUTO_BATCH and be._llm is None
    res = generate_all(be, REQS, g, GenerationStore(tmp_path/"s.jsonl"), run="v", progress=False)
    assert res.error.isna().all() and res.answer.tolist() == [f"Reply 1: {q[:30]}" for q in QUESTIONS]
    (call,) = fake.calls                                       # all four in one LLM.generate call
    assert sorted(p["prompt_token_ids"] for p in call["prompts"]) == sorted(_ids(tiny, r) for r in REQS)   # exactly the hf prompts
    assert res.prompt_tokens.tolist() == [len(_ids(tiny, r)) for r in REQS]
    assert all(s.kw == dict(n=1, max_tokens=64, skip_special_tokens=True, temperature=0.0) for s in call["sampling"])
    assert call["use_tqdm"] is False and call["lora_request"] is None
    recs = [json.loads(l) for l in (tmp_path/"s.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and all(r["identity"]["backend"] == "vllm" for r in recs)
    # a rerun (new backend object) finds every answer under the same keys and starts no engine
    again = VLLMBackend(params)
    res2 = generate_all(again, REQS, g, GenerationStore(tmp_path/"s.jsonl"), run="v", progress=False)
    assert res2.cached.all() and res2.key.tolist() == res.key.tolist() and again._llm is None and len(fake.engines) == 1
    # the identity names the engine: an hf run of the same model never shares these keys, but the prompt template is the same
    hf = HFBackend(ModelParams(backend="hf", id=str(tiny))).identity()
    vi = be.identity()
    assert vi["chat_template_sha256"] == hf["chat_template_sha256"] and vi["backend"] == "vllm" != hf["backend"]


def test_sampling_is_seeded_per_request(tiny, fake):
    be = VLLMBackend(ModelParams(backend="vllm", id=str(tiny)))
    g = GenerationParams(max_new_tokens=8, do_sample=True, temperature=0.8, top_p=0.95, seed=11)
    be.generate(REQS, g)
    be.generate([REQS[2], REQS[0]], g)                          # other batch, other order
    first, second = ({r: s.kw["seed"] for r, s in zip(ids, c["sampling"])} for ids, c in zip([[0, 1, 2, 3], [2, 0]], fake.calls))
    assert second == {2: first[2], 0: first[0]} and len(set(first.values())) == 4
    assert first[1] == request_seed(11, REQS[1]) != request_seed(12, REQS[1])
    assert request_seed(11, GenRequest("n1", [], sample_index=1)) != first[1]
    assert {(s.kw["temperature"], s.kw["top_p"]) for s in fake.calls[0]["sampling"]} == {(0.8, 0.95)}


def test_no_template_is_refused_before_the_engine_and_chatml_adds_the_im_end_stop_token(bare, fake):
    with pytest.raises(ParamsError, match="has no chat template.*Fix: set `model.chat_template`"):
        VLLMBackend(ModelParams(backend="vllm", id=str(bare))).generate(REQS[:1], GenerationParams(max_new_tokens=4))
    assert fake.engines == [] and fake.calls == []
    be = VLLMBackend(ModelParams(backend="vllm", id=str(bare), chat_template="chatml"))
    be.generate(REQS[:1], GenerationParams(max_new_tokens=4))
    assert be.identity()["chat_template_source"] == "params:chatml"
    assert fake.calls[0]["sampling"][0].kw["stop_token_ids"] == [be.chat.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert be.engine_stats()["chat_template"] == {"source": "params:chatml", "sha256": be.identity()["chat_template_sha256"]}


def test_failures_are_per_item(tiny, fake):
    be = VLLMBackend(ModelParams(backend="vllm", id=str(tiny), max_model_len=100))
    long = GenRequest("long", user("The engineer wrote a warm reference letter for her student. " * 3))
    assert len(_ids(tiny, long)) >= 100 > max(len(_ids(tiny, r)) for r in REQS)
    fake.fail_on = "lie to a friend"
    gens = be.generate([*REQS, long], GenerationParams(max_new_tokens=8))
    assert [x.error is None for x in gens] == [True, False, True, True, False]
    assert gens[1].error == "RuntimeError: simulated engine failure" and "max_model_len = 100" in gens[4].error
    assert all(p["prompt_token_ids"] != _ids(tiny, long) for c in fake.calls for p in c["prompts"])   # never sent
    for x in (gens[0], gens[2], gens[3]):
        assert x.finish_reason in ("stop", "length") and (x.finish_reason == "length") == (x.completion_tokens == 8) and x.batch_size >= 1
    assert gens[1].finish_reason == gens[4].finish_reason == "error" and gens[4].prompt_tokens == len(_ids(tiny, long))


def test_multiturn_stop_through_vllm(tiny, fake, tmp_path):
    from silverspoon.studies.stop.stop import load_stop, run_conversations, transcript, N_SENTENCES, INSTRUCTION
    data = load_stop()
    items = data[data.index.isin([0, 1, 2])]
    be = VLLMBackend(ModelParams(backend="vllm", id=str(tiny), batch_size="auto"))
    turns = run_conversations(be, items, GenerationParams(max_new_tokens=64), GenerationStore(tmp_path/"stop.jsonl"), run="t", progress=False)
    assert len(turns) == 3 * (N_SENTENCES + 1) and turns.error.isna().all()
    # batched across conversations: one engine call per turn, each with all three conversations
    assert [len(c["prompts"]) for c in fake.calls] == [3] * (N_SENTENCES + 1)
    for r in items.itertuples():
        tr = transcript(turns, r.progression_id)
        assert [m["role"] for m in tr] == ["user", "assistant"] * (N_SENTENCES + 1)
        assert tr[0]["content"].startswith(INSTRUCTION)
        for k in range(1, len(tr), 2):      # every reply is the engine's own, to the real history it was shown
            assert tr[k]["content"].startswith(f"Reply {(k + 1)//2}: ")
    # the prompt of turn 3 holds the engine's replies to turns 1 and 2
    t3 = HFBackend(ModelParams(backend="hf", id=str(tiny))).tokenizer.decode(fake.calls[2]["prompts"][0]["prompt_token_ids"])
    assert "Reply 1: " in t3 and "Reply 2: " in t3 and "Reply 3: " not in t3
    # resume: a rerun of the same conversations is served turn by turn from the store, without an engine
    again = VLLMBackend(be.params)
    turns2 = run_conversations(again, items, GenerationParams(max_new_tokens=64), GenerationStore(tmp_path/"stop.jsonl"), run="t", progress=False)
    assert turns2.cached.all() and again._llm is None and turns2.answer.tolist() == turns.answer.tolist()


def test_lora_adapter_is_served_with_vllm_lora(tiny, fake, tmp_path):
    torch = pytest.importorskip("torch"); pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    pm = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), LoraConfig(r=12, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    pm.save_pretrained(tmp_path/"adapter")
    be = VLLMBackend(ModelParams(backend="vllm", id=str(tiny), adapter=str(tmp_path/"adapter")))
    be.generate(REQS[:2], GenerationParams(max_new_tokens=4))
    assert fake.engines[0].kw["enable_lora"] is True and fake.engines[0].kw["max_lora_rank"] == 16   # r=12 -> vLLM's next rank
    lr = fake.calls[0]["lora_request"]
    assert lr.lora_path == str((tmp_path/"adapter").resolve()) and lr.lora_int_id == 1
    ident = be.identity()
    assert ident["adapter"] == str(tmp_path/"adapter") and len(ident["adapter_sha256"]) == 64


def test_refusals_and_install_hint(tiny, monkeypatch):
    with pytest.raises(ParamsError, match="pre-quantized checkpoint"):
        VLLMBackend(ModelParams(backend="vllm", id=str(tiny), quantization="8bit")).load()
    with pytest.raises(ParamsError, match="gguf_file"):
        VLLMBackend(ModelParams(backend="vllm", id=str(tiny), gguf_file="x.gguf")).load()
    monkeypatch.setitem(sys.modules, "vllm", None)             # `import vllm` raises ImportError
    be = make_backend(ModelParams(backend="vllm", id=str(tiny)))
    assert isinstance(be, VLLMBackend) and be.identity()["backend"] == "vllm"   # identity needs no vllm
    with pytest.raises(SilverspoonError, match="pip install vllm") as e:
        be.generate(REQS[:1], GenerationParams())
    assert "backend: openai" in str(e.value)


@pytest.mark.parametrize("name", ["vllm-inprocess.yaml", "vllm-server.yaml"])
def test_params_examples_validate(name):
    p = load_params(ROOT/"params"/"examples"/name)
    assert p.model.backend == ("vllm" if name == "vllm-inprocess.yaml" else "openai")
    if p.model.backend == "openai": assert p.model.base_url.startswith("http://") and p.model.base_url.endswith("/v1")
