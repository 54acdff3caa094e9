"""False-positive rate and power of `silverspoon compare`'s paired test, and the cost of the released comparisons.

A seeded simulation, not a test. Scripted models answer a normative-like design: `units` units of 3 answers each, each
answer 1 with the model's rate plus a per-unit effect shared by every model (units differ in difficulty, so two models'
answers on a unit are correlated, as on the real items). Null twins share a rate; a planted pair differs by `--planted`.
For each of `R` replications `silverspoon.studies.compare.compare_runs` pairs them with the package's defaults
(`COMPARE_RESAMPLES` swap patterns, `COMPARE_BOOT` replicates) and the rate at which the raw p < 0.05 (false positives for
the twins, power for the planted pair) and at which the shown interval holds the true delta are reported. Then the
released comparisons `make reports` writes (`write_released_comparisons` of the committed reports, into a temporary
folder) are timed on one core.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/bench_compare.py [--reps 200] [--units 60]

Writes benchmarks/results/compare.csv and prints it.
"""
import argparse, dataclasses, pathlib, tempfile, time
import numpy as np, pandas as pd
from silverspoon.studies import Study, Headline
from silverspoon.studies.compare import compare_runs, COMPARE_RESAMPLES, COMPARE_BOOT

@dataclasses.dataclass
class _Task: pass

TOY = Study(name="toy", title="scripted models", notebook="99_toy.ipynb", task=_Task, validate=lambda p, s: _Task(), summary_rows=lambda *a: None,
            headlines=(Headline("toy", "share yes", "share of answers that are yes"),), units=("unit", 3),
            headlines_from_items=lambda d: {"share yes": float(d["y"].mean()) if len(d) else np.nan})

def scripted(rate:float, difficulty:np.ndarray, rng)->pd.DataFrame:
    "One scripted model's items.csv: 3 answers per unit, P(yes) = clip(rate + the unit's difficulty)."
    p = np.clip(rate + np.repeat(difficulty, 3), 0.01, 0.99)
    return pd.DataFrame({"item": np.repeat(np.arange(len(difficulty)), 3).astype(str), "y": (rng.random(len(p)) < p).astype(int)})

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--units", type=int, default=60)
    ap.add_argument("--planted", type=float, default=0.15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-released", action="store_true", help="skip timing the released comparisons")
    a = ap.parse_args()
    rng, rows = np.random.default_rng(a.seed), []
    for i in range(a.reps):
        difficulty = rng.normal(0, 0.15, a.units)
        runs = {"x": scripted(0.4, difficulty, rng), "twin": scripted(0.4, difficulty, rng), "planted": scripted(0.4 + a.planted, difficulty, rng)}
        c = compare_runs(TOY, runs, pairs=[("x", "twin"), ("x", "planted")], seed=i)
        for r, truth in zip(c.itertuples(), (0.0, a.planted)):
            rows.append(dict(pair="null twins" if truth == 0 else "planted", rejected=r.p < 0.05,
                             covered=(r.ci_low <= truth <= r.ci_high) if pd.notna(r.ci_low) else np.nan, shown=pd.notna(r.ci_low)))
    d = pd.DataFrame(rows)
    out = d.groupby("pair").agg(reps=("rejected", "size"), rejection_rate=("rejected", "mean"), interval_shown=("shown", "mean"),
                                coverage_where_shown=("covered", "mean")).reset_index()
    out["se"] = np.sqrt(out.rejection_rate*(1 - out.rejection_rate)/out.reps)
    out = out.assign(units=a.units, planted=a.planted, n_perm=COMPARE_RESAMPLES, n_boot=COMPARE_BOOT)
    if not a.no_released:
        from silverspoon.core import project_root
        from silverspoon.site.compare_write import write_released_comparisons
        with tempfile.TemporaryDirectory() as t:
            c0, w0 = time.process_time(), time.time()
            pages = write_released_comparisons(project_root()/"reports", t)
            out["released_pages"] = len(pages); out["released_cpu_s"] = round(time.process_time() - c0, 1); out["released_wall_s"] = round(time.time() - w0, 1)
    f = pathlib.Path(__file__).parent/"results"/"compare.csv"
    out.to_csv(f, index=False)
    print(out.to_string(index=False)); print(f"-> {f}")

if __name__ == "__main__": main()
