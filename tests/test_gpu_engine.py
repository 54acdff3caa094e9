"GPU generation engine on CPU: out-of-memory halving, `batch_size: auto`, the compiled fast path, and bench_gpu.py --tiny."
import csv, json, subprocess, sys
from pathlib import Path
import pytest
pytestmark = pytest.mark.colab_lane   # stack-sensitive, run by `make test-colab` only: torch generation engine: out-of-memory handling, torch.compile, batch sizes
from silverspoon.core import ModelParams, GenerationParams
from silverspoon.engine.backends import GenRequest, user
from silverspoon.engine.backends.hf import (HFBackend, kv_cache_bytes_per_token, auto_batch_size, AUTO_BATCH_CPU, AUTO_BATCH_MAX,
                                     AUTO_MEMORY_SHARE)
from silverspoon.engine.store import GenerationStore, generate_all

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from conftest import ROOT
SCENARIOS = ["A rich family bought a large house near the sea.", "He grew up poor and worked two jobs while studying.",
             "The nurse helped the patient walk home.", "Is it acceptable to lie to a friend? Answer yes or no."]


def _reqs(n, tag="q"):
    "n chats of different lengths (1-3 sentences)."
    return [GenRequest(f"{tag}{i}", user(" ".join(SCENARIOS[(i + k) % 4] for k in range(i % 3 + 1)))) for i in range(n)]




def _card(backend, fits):
    "Make `backend`'s model behave like a GPU that holds at most `fits` prompts per batch; returns the list of batch sizes tried."
    real, tried = backend.model.generate, []
    def generate(**kw):
        tried.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > fits: raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.50 GiB (simulated)")
        return real(**kw)
    backend.model.generate = generate
    return tried


def _lines(path): return [json.loads(l) for l in Path(path).read_text().splitlines() if l.strip()]


# ------------------------------------------------------------------ out-of-memory halving
def test_oom_halves_the_batch_answers_every_item_once_and_reuses_the_learned_size(tiny, tmp_path):
    g = GenerationParams(max_new_tokens=4)
    reference = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=16)).generate(_reqs(13) + _reqs(10, "r"), g)
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=16))
    tried = _card(be, fits=5)
    store = GenerationStore(tmp_path/"run.jsonl")
    res = generate_all(be, _reqs(13), g, store, run="oom", progress=False)
    # 13 -> out of memory -> 7 (out of memory) + 6; 7 -> 4 + 3; the queued 6 is cut to the learned 4: 4 + 2
    assert tried == [13, 7, 4, 3, 4, 2] and be.learned_batch_size == 4
    recs = _lines(tmp_path/"run.jsonl")
    assert len(recs) == 13 and len({r["key"] for r in recs}) == 13                 # every item stored exactly once
    assert res.error.isna().all() and res.answer.tolist() == [x.text for x in reference[:13]]   # none lost, none swapped
    # the next call starts at the learned size: no out-of-memory at all
    tried.clear()
    gens = be.generate(_reqs(10, "r"), g)
    assert tried == [4, 4, 2] and [x.text for x in gens] == [x.text for x in reference[13:]]
    assert sorted(x.batch_size for x in gens) == [2, 2, 4, 4, 4, 4, 4, 4, 4, 4]
    # a rerun is served from the store: nothing generated
    tried.clear()
    again = generate_all(be, _reqs(13), g, GenerationStore(tmp_path/"run.jsonl"), run="oom", progress=False)
    assert again.cached.all() and tried == [] and len(_lines(tmp_path/"run.jsonl")) == 13


def test_a_prompt_that_alone_does_not_fit_fails_alone(tiny):
    "The halvings that isolate one over-long prompt are forgotten: the other prompts keep their batch size."
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=8))
    reqs = _reqs(6)
    reqs[2] = GenRequest("long", user(" ".join(SCENARIOS * 3)))
    lens = [len(be.tokenizer(be.render(r.messages), add_special_tokens=False)["input_ids"]) for r in reqs]
    assert lens[2] > max(lens[:2] + lens[3:])
    real, tried = be.model.generate, []
    def generate(**kw):    # any batch holding the long prompt runs out of memory, even alone; the others always fit
        tried.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[1] >= lens[2]: raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(**kw)
    be.model.generate = generate
    gens = be.generate(reqs, GenerationParams(max_new_tokens=3))
    assert len(gens) == 6 and [x.error is None for x in gens] == [i != 2 for i in range(6)]
    assert gens[2].finish_reason == "error" and gens[2].error.startswith("OutOfMemoryError: CUDA out of memory")
    # 6 -> 3 (long + 2) -> 2 (long + 1) -> 1 (long, fails); then the 1 and 1 split off on the way, and the other 3 together
    assert tried == [6, 3, 2, 1, 1, 1, 3] and be.learned_batch_size is None
    tried.clear(); be.generate(reqs[3:], GenerationParams(max_new_tokens=3))
    assert tried == [3]


def test_other_errors_keep_item_by_item_retry_and_learn_nothing(tiny):
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=4))
    real, tried = be.model.generate, []
    def generate(**kw):
        tried.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > 1: raise ValueError("not a memory problem")
        return real(**kw)
    be.model.generate = generate
    gens = be.generate(_reqs(4), GenerationParams(max_new_tokens=2))
    assert tried == [4, 1, 1, 1, 1] and all(x.error is None and x.batch_size == 1 for x in gens) and be.learned_batch_size is None


# ------------------------------------------------------------------ batch_size: auto
def test_kv_cache_bytes_per_token_from_real_configs():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    llama3_8b = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8)
    assert kv_cache_bytes_per_token(llama3_8b, 2) == 2*32*8*128*2 == 131072
    llama2_7b = LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None)   # no GQA
    assert kv_cache_bytes_per_token(llama2_7b, 2) == 2*32*32*128*2
    qwen = Qwen2Config(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4)
    assert kv_cache_bytes_per_token(qwen, 2) == 2*28*4*128*2
    mistral = MistralConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    assert kv_cache_bytes_per_token(mistral, 4) == 2*32*8*128*4


def test_auto_batch_size_estimate():
    per_tok = 131072
    assert auto_batch_size(62e9, per_tok, 214) == AUTO_BATCH_MAX                        # H100 80GB, 8B bf16, normative
    n = auto_batch_size(23e9, per_tok, 964)                                             # A100 40GB, 8B bf16, STOP's last turn
    # measured on an H100 acting as a 40 GB card (bench_gpu.py --card-gb 40): 113 conversations fitted at STOP's last turn
    assert n == int(23e9 * AUTO_MEMORY_SHARE) // (per_tok * 964) and 50 < n <= 113
    assert auto_batch_size(0, per_tok, 964) == 1 and auto_batch_size(62e9, per_tok, 214, cap=64) == 64


def test_auto_on_cpu_is_the_documented_default(tiny, tmp_path):
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size="auto"))
    assert be.batch_size == AUTO_BATCH_CPU == 8
    sizes = []
    real = be.model.generate
    be.model.generate = lambda **kw: (sizes.append(kw["input_ids"].shape[0]), real(**kw))[1]
    res = generate_all(be, _reqs(11), GenerationParams(max_new_tokens=2), GenerationStore(None), run="auto", progress=False)
    assert sizes == [8, 3] and res.error.isna().all() and be.auto_estimate == AUTO_BATCH_CPU


def test_auto_on_a_card_estimates_from_free_memory_and_adapts(tiny):
    g = GenerationParams(max_new_tokens=4)
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size="auto"))
    reqs = _reqs(20)
    longest = max(len(be.tokenizer(be.render(r.messages), add_special_tokens=False)["input_ids"]) for r in reqs)
    per_seq = kv_cache_bytes_per_token(be.model.config, 4) * (longest + g.max_new_tokens)
    be._free_accelerator_bytes = lambda: int(12.5 * per_seq / AUTO_MEMORY_SHARE)      # room for 12 sequences' KV cache
    assert be.batch_size == AUTO_BATCH_MAX                                             # what generate_all hands over on a card
    tried = _card(be, fits=7)
    gens = be.generate(reqs, g)
    assert be.auto_estimate == 12 and tried == [12, 6, 6, 6, 2] and be.learned_batch_size == 6
    assert all(x.error is None for x in gens) and be.batch_size == 6


# ------------------------------------------------------------------ compiled path
def test_compile_is_in_the_identity_only_when_on(tiny):
    plain = HFBackend(ModelParams(backend="hf", id=str(tiny))).identity()
    comp = HFBackend(ModelParams(backend="hf", id=str(tiny), compile=True)).identity()
    assert "compile" not in plain and comp == {**plain, "compile": True}


def test_compiled_path_gives_the_plain_greedy_answers(tiny):
    "Static KV cache + torch.compile (inductor, mode=default on CPU): one compilation, then the same shapes reuse it."
    g = GenerationParams(max_new_tokens=5)
    reqs = _reqs(6)
    plain = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=8)).generate(reqs, g)
    cb = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=8, compile=True))
    shapes, real = [], cb.model.generate
    def spy(**kw):
        shapes.append(tuple(kw["input_ids"].shape)); assert kw["cache_implementation"] == "static" and kw["compile_config"] is not None
        return real(**kw)
    cb.model.generate = spy
    comp = cb.generate(reqs, g)
    assert [x.text for x in comp] == [x.text for x in plain] and [x.completion_tokens for x in comp] == [x.completion_tokens for x in plain]
    assert shapes[0][1] % 64 == 0                                       # left-padded to a multiple of COMPILE_PAD_MULTIPLE
    assert cb.compiles == 1 and cb.compile_seconds > 0
    assert [x.text for x in cb.generate(reqs, g)] == [x.text for x in plain] and cb.compiles == 1   # no recompilation


# ------------------------------------------------------------------ the GPU benchmark, tiny shape on CPU
def test_bench_gpu_tiny_runs_and_writes_its_csv(tmp_path):
    out = tmp_path/"bench.csv"
    p = subprocess.run([sys.executable, str(ROOT/"benchmarks"/"bench_gpu.py"), "--tiny", "--threads", "1", "--csv", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(out.open()))
    paths = [r["path"] for r in rows]
    assert paths == ["naive loop", "hf batch 2", "hf batch 4", "hf auto", "hf compiled 1", "hf compiled 4", "vllm"]
    ran = [r for r in rows if not r["note"].startswith("skipped")]
    assert [r["path"] for r in ran] == paths[:4]
    for r in ran:
        assert float(r["tokens_per_s"]) > 0 and int(r["new_tokens"]) > 0 and 0 < float(r["share_of_bound"]) < 1
        assert r["card"] and r["shape"] == "tiny" and float(r["copy_gb_per_s"]) > 0
    assert int(ran[0]["prompts"]) < int(ran[1]["prompts"]) and ran[3]["batch_size"] == str(AUTO_BATCH_CPU)
    assert rows[4]["note"].startswith("skipped: CPU") and rows[6]["note"].startswith("skipped:")
    assert "naive loop" in p.stdout and "% bound" in p.stdout and str(out) in p.stdout

def test_bench_gpu_without_data_is_one_clear_error_and_writes_nothing_in_the_project(tmp_path):
    "No data folder: one `error:` line naming the file and the fix, no traceback; the default CSV never lands in the project root."
    import os
    empty = tmp_path/"no-data"; empty.mkdir()
    p = subprocess.run([sys.executable, str(ROOT/"benchmarks"/"bench_gpu.py"), "--tiny", "--threads", "1"], cwd=tmp_path,
                       env={**os.environ, "SILVERSPOON_DATA": str(empty)}, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "SILVERSPOON_DATA" in p.stderr and not list(ROOT.glob("bench_gpu-*.csv")) and not list(tmp_path.glob("*.csv"))


# ------------------------------------------------------------------ `batch_size: auto` through the store and the CLI
def test_generate_all_takes_auto_from_the_backend_per_batch(tiny, tmp_path):
    "generate_all hands over the backend's batch size when told `auto`, read anew per batch, so a learned size also bounds what a kill loses."
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size="auto"))
    be._free_accelerator_bytes = lambda: 10**12       # a (simulated) card: auto would start at AUTO_BATCH_MAX
    tried = _card(be, fits=3)
    store = GenerationStore(tmp_path/"auto.jsonl")
    res = generate_all(be, _reqs(11), GenerationParams(max_new_tokens=3), store, run="auto", batch_size="auto", progress=False)
    # the first chunk is all 11 (the backend's AUTO_BATCH_MAX): 11 -> 6 -> 3 fits; then every chunk handed over is at most 3
    assert tried[:3] == [11, 6, 3] and be.learned_batch_size == 3 and max(tried[3:]) <= 3
    recs = _lines(tmp_path/"auto.jsonl")
    assert len(recs) == 11 and res.error.isna().all() and {r["batch_size"] for r in recs} <= {1, 2, 3}


@pytest.mark.parametrize("study", ["normative", "stop"])
def test_batch_size_auto_runs_end_to_end(tiny, tmp_path, study, cli):
    "A params file with `batch_size: auto` runs through `silverspoon run` (it once crashed with int('auto') in generate_all), in this process (`cli`)."
    import yaml
    f = tmp_path/f"{study}-auto.yaml"
    sample = {"n": 5, "stratify_by": "topic"} if study == "normative" else {"n": 3, "stratify_by": "severity"}
    f.write_text(yaml.safe_dump({"study": study, "run": f"{study}-auto", "sample": sample,
                                 "generation": {"max_new_tokens": 3},
                                 "model": {"backend": "hf", "id": str(tiny), "device": "cpu", "dtype": "float32", "batch_size": "auto"}}))
    store, reports = tmp_path/"store", tmp_path/"reports"
    r = cli("run", f, "--reports-dir", reports, "--no-index", env={"SILVERSPOON_STORE": str(store)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    recs = [json.loads(l) for j in store.rglob("*.jsonl") for l in j.read_text().splitlines() if l.strip()]
    assert recs and all(x["error"] is None and 1 <= x["batch_size"] <= AUTO_BATCH_CPU for x in recs)
    assert (reports/study/f"{study}-auto.html").exists()


@pytest.mark.parametrize("message", ["CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
                                     "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"])
def test_plain_runtime_error_out_of_memory_is_halved_too(tiny, message):
    "Some kernels and cuBLAS report an out-of-memory as a plain RuntimeError: it is halved like torch's OutOfMemoryError."
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=8))
    real, tried = be.model.generate, []
    def generate(**kw):
        tried.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > 2: raise RuntimeError(message)
        return real(**kw)
    be.model.generate = generate
    gens = be.generate(_reqs(6), GenerationParams(max_new_tokens=2))
    # 6 -> out of memory -> 3 + 3; 3 -> 2 + 1; the queued 3 is cut to the learned 2: 2 + 1
    assert tried == [6, 3, 2, 1, 2, 1] and be.learned_batch_size == 2 and all(g.error is None for g in gens)


def test_other_runtime_errors_are_not_taken_for_out_of_memory(tiny):
    be = HFBackend(ModelParams(backend="hf", id=str(tiny), batch_size=8))
    real, tried = be.model.generate, []
    def generate(**kw):
        tried.append(kw["input_ids"].shape[0])
        raise RuntimeError("CUDA error: device-side assert triggered")
    be.model.generate = generate
    gens = be.generate(_reqs(3), GenerationParams(max_new_tokens=2))
    assert tried == [3, 1, 1, 1] and be.learned_batch_size is None                       # one at a time, nothing learned
    assert all(g.error.startswith("RuntimeError: CUDA error: device-side assert") for g in gens)
