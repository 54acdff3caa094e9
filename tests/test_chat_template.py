"""Issue 29 part 1, the chat template: a hf/vllm model whose tokenizer has no chat template is refused before any notebook
runs, with the fix (`model.chat_template`); a named or file template runs, and its source and sha256 reach the identity
and the report's provenance. A tokenizer's own template keeps the identity (and so the committed store keys) unchanged."""
import hashlib, json
from pathlib import Path
import pytest
from silverspoon.core import ModelParams, GenerationParams, ParamsError, load_params, CHAT_TEMPLATES
from silverspoon.engine.backends import GenRequest, user
from conftest import ROOT, run_cli, write_params

pytest.importorskip("transformers")
from silverspoon.engine.backends.hf import HFBackend, _stop_ids, CHATML_TEMPLATE

REPLAY = "study: normative\nmodel: {backend: replay, id: GPT4}\n"
sha = lambda text: hashlib.sha256(text.encode("utf-8")).hexdigest()


def _params(path:Path, model:dict)->Path:
    return write_params(path, "normative", model, task={"prompt_style": "llama", "n_boot": 50}, sample={"n": 30, "stratify_by": "topic", "seed": 0},
                        generation={"max_new_tokens": 8})


def test_silverspoon_run_refuses_a_model_without_a_template_before_any_notebook(tmp_path, bare):
    "The command exits 2 with the file, the field and the fix; the replay run named first never started (nothing written)."
    good = tmp_path/"good.yaml"; good.write_text(REPLAY)
    bad = _params(tmp_path/"base-model.yaml", {"backend": "hf", "id": str(bare)})
    store, reports = tmp_path/"store", tmp_path/"reports"
    r = run_cli("run", good, bad, "--reports-dir", reports, env={"SILVERSPOON_STORE": str(store)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{bad}: model.id = '{bare}' (backend hf): its tokenizer has no chat template" in r.stderr, r.stderr
    assert "Fix: set `model.chat_template`" in r.stderr and "chatml, llama3" in r.stderr and "Nothing was run." in r.stderr
    assert "Traceback" not in r.stderr
    assert not reports.exists() and not store.exists()           # no notebook ran: run_params_file makes reports/<study>/ first


def test_run_params_file_refuses_before_papermill(tmp_path, bare, monkeypatch):
    import papermill
    from silverspoon.run import executor as runner
    def never(*a, **k): raise AssertionError("a notebook was started")
    monkeypatch.setattr(papermill, "execute_notebook", never)
    f = _params(tmp_path/"base-model.yaml", {"backend": "vllm", "id": str(bare)})
    with pytest.raises(ParamsError, match=r"base-model.yaml: model.id = .*\(backend vllm\): its tokenizer has no chat template"):
        runner.run_params_file(f, tmp_path/"reports")
    assert not (tmp_path/"reports").exists()


def test_the_field_is_validated_with_the_params(tmp_path):
    ok = load_params({"study": "normative", "run": "r", "model": {"backend": "hf", "id": "m", "chat_template": "chatml"}})
    assert ok.model.chat_template == "chatml"
    for model, needle in [({"backend": "hf", "id": "m", "chat_template": "chat-ml"},
                           "x.yaml: field `model.chat_template` = 'chat-ml' is neither a known template nor a file"),
                          ({"backend": "openai", "id": "m", "chat_template": "chatml"},
                           "x.yaml: field `model.chat_template` is set but backend 'openai' renders no prompts")]:
        with pytest.raises(ParamsError, match="Fix: ") as e: load_params({"study": "normative", "run": "r", "model": model}, "x.yaml")
        assert needle in str(e.value)


def test_chatml_by_name_runs_and_ends_on_im_end(bare):
    b = HFBackend(ModelParams(backend="hf", id=str(bare), chat_template="chatml"))
    ident = b.identity()
    assert (ident["chat_template_source"], ident["chat_template_sha256"]) == ("params:chatml", sha(CHAT_TEMPLATES["chatml"].text))
    assert b.render(user("Hi")) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    gens = b.generate([GenRequest("a", user("Hi")), GenRequest("b", user("A rich family"))], GenerationParams(max_new_tokens=4))
    assert all(g.error is None and g.finish_reason in ("stop", "length") for g in gens)
    im_end = b.tokenizer.convert_tokens_to_ids("<|im_end|>")
    b.tokenizer.eos_token = "<|endoftext|>"; b.model.generation_config.eos_token_id = b.tokenizer.eos_token_id   # an eos that is not <|im_end|>
    assert im_end in _stop_ids(b.tokenizer, b.model, b.chat_template_end_tokens) and im_end not in _stop_ids(b.tokenizer, b.model)


def test_a_named_template_whose_tokens_the_model_lacks_is_refused(bare):
    with pytest.raises(ParamsError, match=r"writes <\|start_header_id\|>, <\|end_header_id\|>, <\|eot_id\|>, not tokens of the vocabulary"):
        HFBackend(ModelParams(backend="hf", id=str(bare), chat_template="llama3")).identity()


def test_a_file_template_warns_about_markers_missing_from_the_vocabulary(tmp_path, bare):
    f = tmp_path/"zephyr-like.jinja"
    f.write_text("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}<|assistant|>\n<|user|>")
    with pytest.warns(UserWarning, match=r"writes <\|assistant\|>, <\|user\|>, not tokens of the vocabulary"):
        b = HFBackend(ModelParams(backend="hf", id=str(bare), chat_template=str(f)))
        assert b.identity()["chat_template_source"] == f"params:{f}" and b.chat_template_end_tokens == ()


def test_a_tokenizer_template_keeps_the_committed_store_keys():
    "SmolLM2's identity (source `tokenizer`) is byte-identical to the one in its committed store: every stored answer is still hit."
    from silverspoon.engine.store import GenerationStore, request_key
    from silverspoon.core import canonical_json
    p = load_params(ROOT/"params"/"normative"/"smollm2-135m.yaml")
    ident = HFBackend(p.model).identity()
    recs = GenerationStore(ROOT/"store"/"normative"/"smollm2-135m.jsonl").records()
    assert len(recs) >= 180 and canonical_json(ident) == canonical_json(recs[0]["identity"])
    assert list(ident) == ["backend", "id", "package", "package_version", "revision", "commit", "gguf_file", "quantization", "dtype",
                           "chat_template_sha256", "chat_template_source"] and ident["chat_template_source"] == "tokenizer"
    assert all(request_key(ident, r["item_id"], r["messages"], GenerationParams(**r["gen"]), r["sample_index"]) == r["key"] for r in recs)


def test_a_template_file_runs_end_to_end_and_its_sha256_is_recorded(root, tmp_path, bare, monkeypatch):
    """A whole normative run (30 items) of the base model with a template file: published, every stored answer names the
    template and its sha256. The random model answers nothing, so the run ends early (the reply gate), before the
    provenance block; a finished run's provenance.json names its template (the committed SmolLM2 runs: checked here)."""
    from silverspoon.run.executor import run_params_file
    monkeypatch.setenv("SILVERSPOON_STORE", str(tmp_path/"store"))
    tpl = tmp_path/"base-chatml.jinja"
    tpl.write_text(CHATML_TEMPLATE.replace("assistant\\n", "assistant\\nAnswer: "))
    f = _params(tmp_path/"base-model.yaml", {"backend": "hf", "id": str(bare), "chat_template": str(tpl), "batch_size": 16})
    run_params_file(f, tmp_path/"reports")
    out = tmp_path/"reports"/"normative"/"base-model"
    assert (out/"answer_summary.csv").exists() and (out/"ended.txt").exists()
    recs = [json.loads(l) for l in (tmp_path/"store"/"normative"/"base-model.jsonl").read_text().splitlines()]
    assert len(recs) == 30 and {(r["identity"]["chat_template_source"], r["identity"]["chat_template_sha256"]) for r in recs} == {(f"params:{tpl}", sha(tpl.read_text()))}
    assert all(r["messages"] and r["error"] is None for r in recs)
    prov = json.loads((root/"reports"/"normative"/"smollm2-135m"/"provenance.json").read_text())
    assert prov["chat_template"]["source"] == "tokenizer" and len(prov["chat_template"]["sha256"]) == 64 and "chat_template" not in prov["engine"]


def test_the_openai_backend_says_the_server_applies_the_template():
    from silverspoon.engine.backends.openai import OpenAIBackend
    b = OpenAIBackend(ModelParams(backend="openai", id="m", base_url="http://localhost:8000/v1", api_key_env="NO_SUCH_API_KEY"))
    assert b.engine_stats() == {"chat_template": {"source": "server", "sha256": None}}
    assert b.identity() == {"backend": "openai", "base_url": "http://localhost:8000/v1", "id": "m"}   # the store keys are unchanged


# --- issue 50 item 7: a template file's end-of-turn token is a stop token
GEMMA_LIKE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
              "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


@pytest.fixture(scope="module")
def own_end(tmp_path_factory):
    "A tiny base Llama whose vocabulary has Gemma's turn tokens `<start_of_turn>` and `<end_of_turn>` (eos stays `<|im_end|>`)."
    from transformers import AutoTokenizer, AutoModelForCausalLM
    from silverspoon.testing import build_tiny_llama
    path = build_tiny_llama(tmp_path_factory.mktemp("gemma-like")/"m", chat_template=False)
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    model.resize_token_embeddings(len(tok))
    tok.save_pretrained(path); model.save_pretrained(path)
    return path


def _always_ends_turn(b:HFBackend):
    "Make the loaded model emit `<end_of_turn>` at every step (an lm_head whose bias picks it), as a model trained on the template ends its turn."
    import torch
    end, m = b.tokenizer.convert_tokens_to_ids("<end_of_turn>"), b.model
    head = torch.nn.Linear(m.lm_head.in_features, m.lm_head.out_features, bias=True)
    with torch.no_grad(): head.weight.zero_(); head.bias.zero_(); head.bias[end] = 10.0
    m.lm_head = head
    return end


@pytest.mark.parametrize("declare", [False, True])
def test_a_template_file_whose_turn_ends_with_its_own_token_stops_there(tmp_path, own_end, declare):
    """A Jinja file whose assistant turn ends with `<end_of_turn>` (not eos, not a known template's end): generation stops
    on it (one token, finish "stop"), read off the template or declared in it, instead of running to max_new_tokens."""
    f = tmp_path/"gemma-like.jinja"
    f.write_text(("{# end_of_turn: <end_of_turn> #}" if declare else "") + GEMMA_LIKE)
    b = HFBackend(ModelParams(backend="hf", id=str(own_end), chat_template=str(f)))
    assert b.render(user("Hi")).endswith("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")
    assert b.chat_template_end_tokens == ("<end_of_turn>",)
    end = _always_ends_turn(b)
    assert end in _stop_ids(b.tokenizer, b.model, b.chat_template_end_tokens) and end not in _stop_ids(b.tokenizer, b.model)
    gens = b.generate([GenRequest("a", user("Hi")), GenRequest("b", user("A rich family"))], GenerationParams(max_new_tokens=12))
    assert [(g.error, g.finish_reason, g.completion_tokens, g.text) for g in gens] == [(None, "stop", 1, "")]*2


def test_the_named_gemma_template_ends_on_end_of_turn(own_end):
    b = HFBackend(ModelParams(backend="hf", id=str(own_end), chat_template="gemma"))
    assert b.identity()["chat_template_source"] == "params:gemma" and b.chat_template_end_tokens == ("<end_of_turn>",)
    assert b.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]).endswith(
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n")   # Gemma has no system turn: it opens the user's
    _always_ends_turn(b)
    assert b.generate([GenRequest("a", user("Hi"))], GenerationParams(max_new_tokens=12))[0].completion_tokens == 1


def test_a_declared_end_token_the_model_lacks_is_refused_and_a_file_without_one_warns(tmp_path, own_end):
    f = tmp_path/"t.jinja"
    f.write_text("{# end_of_turn: <|eot_id|> #}" + GEMMA_LIKE)
    with pytest.raises(ParamsError, match=r"declares end_of_turn <\|eot_id\|>, not tokens of the vocabulary.*Fix: "):
        HFBackend(ModelParams(backend="hf", id=str(own_end), chat_template=str(f))).identity()
    f.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}model:")
    with pytest.warns(UserWarning, match=r"declares no end-of-turn token.*Fix: add `\{# end_of_turn: <token> #\}`"):
        b = HFBackend(ModelParams(backend="hf", id=str(own_end), chat_template=str(f)))
        assert b.identity()["chat_template_source"] == f"params:{f}" and b.chat_template_end_tokens == ()
