"""Coverage of the policy's bootstrap intervals and false-positive rate of its tests, at the policy's minimum units.

A seeded simulation, not a test (it takes a minute or two on one core). For each design at 20 and 30 units (the
policy's `BOOT_MIN_UNITS` and just above), `R` samples are drawn from a population whose true value is known, and the
package's own `stats.cluster_bootstrap` gives a 95% interval by the plain percentile method and by the policy's method
(`stats.bca_ci`: BCa with bias correction and jackknife acceleration, small-sample expanded, widened to the hull of the
expanded percentile interval; columns `*_bca`). Coverage is the share of intervals
that contain the true value (target >= 0.93). Under the null (true effect 0) the designs' tests are run too (paired
difference: the within-unit sign-flip test `stats.tests.sign_flip_test`; two groups: `stats.tests.two_group_permutation_test`),
and their false-positive rate at alpha 0.05 is reported (target <= 0.05).

Designs:
- skewed mean: the mean of an exponential score per unit (skewness 2), truth 1;
- very skewed mean: the mean of a log-normal(0, 1) score per unit (skewness 6.2), truth exp(1/2);
- paired difference: per unit a - b with a = u + e1, b = u + e2, u ~ N(0, 1), e ~ log-normal(0, 1): truth 0;
- proportion: the share of units with a yes, p = 0.2;
- two groups (null only): difference of means of two log-normal groups of n units each, truth 0.

    SILVERSPOON_DATA=../shared/data nice .venv/bin/python benchmarks/bench_coverage.py [--reps 1000] [--n-boot 2000]

Writes benchmarks/results/coverage.csv and prints the table.
"""
import silverspoon.stats.tests, silverspoon.stats.agreement, silverspoon.stats.groups, silverspoon.stats.power
import argparse, pathlib, time
import numpy as np, pandas as pd
from silverspoon.stats import cluster_bootstrap, ALPHA
from silverspoon.stats.tests import sign_flip_test, two_group_permutation_test

def draw(design:str, n:int, rng)->tuple[np.ndarray, float]:
    "One sample of `n` units of `design` and the true value of its statistic."
    if design == "skewed mean": return rng.exponential(size=n), 1.0
    if design == "very skewed mean": return rng.lognormal(size=n), float(np.exp(0.5))
    if design == "paired difference": u = rng.normal(size=n); return (u + rng.lognormal(size=n)) - (u + rng.lognormal(size=n)), 0.0
    if design == "proportion": return (rng.random(n) < 0.2).astype(float), 0.2
    raise ValueError(design)

def coverage(design:str, n:int, reps:int, n_boot:int, seed:int)->dict:
    "Coverage and mean width of the percentile and BCa intervals over `reps` samples; the paired design's test false-positive rate."
    rng = np.random.default_rng(seed)
    hit = {"percentile": 0, "bca": 0}; width = {"percentile": 0.0, "bca": 0.0}; shown = {"percentile": 0, "bca": 0}; rejects = 0; tested = 0
    for r in range(reps):
        x, truth = draw(design, n, rng)
        for m in hit:
            b = cluster_bootstrap(lambda W: (W @ x) / W.sum(1), n, n_boot=n_boot, seed=r, estimate=float(x.mean()), additive=True, method=m)
            lo, hi = b.ci
            if np.isfinite(lo): shown[m] += 1; hit[m] += lo <= truth <= hi; width[m] += hi - lo
        if design == "paired difference":
            t = sign_flip_test(x, n_resamples=1999, seed=r); tested += 1; rejects += t["p"] < ALPHA
    row = {"design": design, "n_units": n, "reps": reps, "n_boot": n_boot}
    for m in hit:
        row[f"coverage_{m}"] = hit[m] / max(shown[m], 1); row[f"shown_{m}"] = shown[m]; row[f"mean_width_{m}"] = width[m] / max(shown[m], 1)
    row["test"] = "sign_flip_test" if tested else ""
    row["false_positive_rate"] = rejects / tested if tested else np.nan
    return row

def null_two_groups(n:int, reps:int, seed:int)->dict:
    "False-positive rate of `two_group_permutation_test` between two log-normal groups of `n` units each (no difference)."
    rng = np.random.default_rng(seed)
    rej = sum(two_group_permutation_test(rng.lognormal(size=n), rng.lognormal(size=n), n_resamples=1999, seed=r)["p"] < ALPHA for r in range(reps))
    return {"design": "two groups (null)", "n_units": n, "reps": reps, "n_boot": 0, "test": "two_group_permutation_test", "false_positive_rate": rej / reps}

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000); ap.add_argument("--n-boot", type=int, default=2000); ap.add_argument("--seed", type=int, default=52)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "coverage.csv"))
    a = ap.parse_args()
    t0 = time.perf_counter(); rows = []
    for k, design in enumerate(["skewed mean", "very skewed mean", "paired difference", "proportion"]):
        for n in (20, 30): rows.append(coverage(design, n, a.reps, a.n_boot, a.seed + 10*k + n))
    for n in (20, 30): rows.append(null_two_groups(n, a.reps, a.seed + 100 + n))
    df = pd.DataFrame(rows)
    df.to_csv(a.out, index=False, float_format="%.4f")
    mc = np.sqrt(0.95 * 0.05 / a.reps)
    with pd.option_context("display.width", 200, "display.max_columns", 20): print(df.round(3).to_string(index=False))
    print(f"\nMonte-Carlo SE of a coverage near 0.95: {mc:.3f}; of a false-positive rate near 0.05: {mc:.3f}. {time.perf_counter() - t0:.0f} s. Wrote {a.out}")

if __name__ == "__main__": main()
