"""STOP's multi-turn runner through HFBackend(batch_size="auto") on a random-initialised model of real shape.

Every STOP progression (450) is asked as a real chat, turn by turn (5 sentences + the counterfactual = 2700 requests,
64 new tokens each), once on the whole card and once acting as a smaller one (`--card-gb`, a ballast tensor holds the
rest), so the `auto` estimate and out-of-memory halving meet the long prompts of the last turns. Prints requests/s,
the auto estimate, the size learned after an out-of-memory (None: none happened), peak memory and failed requests.
This is how the STOP figures of `nbs/guide_benchmarks.md` (the docs' "Benchmarks and GPU figures" page) were measured.

    python benchmarks/bench_gpu_stop.py --tokenizer PATH            # Llama-3-8B shape, bf16: ~6 min on an H100
    python benchmarks/bench_gpu_stop.py --tiny                      # the same code on CPU, 3 progressions, seconds
"""
import argparse, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
import bench_gpu as B


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU, 3 progressions, 4 new tokens")
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder (default as bench_gpu.py)")
    ap.add_argument("--cards-gb", default="full,40", help="comma-separated: 'full' and/or card sizes in GB to act as (GPU only)")
    a = ap.parse_args(argv)
    import torch
    from silverspoon.core import GenerationParams
    from silverspoon.engine.store import GenerationStore
    from silverspoon.studies.stop.stop import load_stop, run_conversations, StopTask
    ba = B.parse_args(["--tiny"] if a.tiny else [] + (["--tokenizer", a.tokenizer] if a.tokenizer else []))
    device = "cuda" if torch.cuda.is_available() and not a.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tmp = Path(tempfile.mkdtemp(prefix="bench_gpu_stop-"))
    tok, _ = B.load_tokenizer(ba, tmp)
    model = B.random_model(ba, tok, torch, device, dtype)
    items = load_stop()
    if a.tiny: items = items.head(3)
    gen = GenerationParams(max_new_tokens=4 if a.tiny else 64, do_sample=False)
    cards = ["full"] if device == "cpu" else a.cards_gb.split(",")
    print(f"{len(items)} progressions, {gen.max_new_tokens} new tokens, device {device}", flush=True)
    for card in cards:
        ballast = None if card == "full" else B.hold_memory(torch, float(card))
        be = B.hf_backend(model, tmp/"model", device, str(dtype).split(".")[-1], "auto")
        B.reset_peak(torch, device); t = time.perf_counter()
        out = run_conversations(be, items, gen, GenerationStore(None), run="bench", opts=StopTask(), progress=False)
        B.sync(torch, device); secs = time.perf_counter() - t
        peak = B.peak_gb(torch, device)
        print(f"card {card}{'' if card == 'full' else ' GB'}: {len(out)} requests in {secs:.1f} s = {len(out)/secs:.1f} requests/s; "
              f"auto estimate {be.auto_estimate}, learned {be.learned_batch_size}; peak {peak:.1f} GB; failed {int(out.error.notna().sum())}", flush=True)
        del be, out
        if ballast is not None: ballast = None; B.release_memory(torch)


if __name__ == "__main__": main()
