"Statistical checks of silverspoon.stats that are too slow or too random for the notebook: CI coverage and clustering."
import warnings
import numpy as np, pandas as pd
import pytest
from sklearn import metrics as skm
from silverspoon.stats.agreement import agreement_table, agreement_metrics, metrics_from_counts, confusion
from silverspoon.stats import cluster_bootstrap_ci, cluster_proportion_ci, UndefinedStatWarning
from silverspoon.stats.agreement import METRICS


def simulate(rng, C=150, reps=3, p1=0.36, agree=0.65, icc=0.6):
    """SilverSpoon-shaped data: C scenarios x `reps` variants sharing the gold label; the model agrees with the gold
    label with a scenario-level probability ~ Beta(mean=agree, intra-cluster correlation=icc).
    Population values: acc = agree, kappa = (agree - pe)/(1 - pe) with pe from the two marginals."""
    a, b = agree*(1/icc - 1), (1 - agree)*(1/icc - 1)
    gold = np.tile((rng.random(C) < p1).astype(int), reps)
    pc = np.tile(rng.beta(a, b, C), reps)
    pred = np.where(rng.random(C*reps) < pc, gold, 1 - gold)
    return gold, pred, np.tile(np.arange(C), reps)


def true_values(p1=0.36, agree=0.65):
    q1 = p1*agree + (1 - p1)*(1 - agree)            # P(model says 1)
    pe = p1*q1 + (1 - p1)*(1 - q1)
    return dict(acc=agree, kappa=(agree - pe)/(1 - pe))


def test_cluster_ci_coverage():
    "Clustered percentile CIs cover the true acc and kappa at about the nominal 95%; iid CIs on the same data do not."
    rng, R = np.random.default_rng(2024), 250
    truth = true_values()
    hit = dict(acc=0, kappa=0, acc_prop=0, acc_iid=0)
    for r in range(R):
        g, p, s = simulate(rng)
        tab = agreement_table(g, p, s, n_boot=400, seed=r).set_index("metric")
        for m in ("acc", "kappa"): hit[m] += tab.ci_low[m] <= truth[m] <= tab.ci_high[m]
        agree = (g == p).astype(int)                   # its mean is acc: cheap checks of the proportion CI
        pc, pi = cluster_proportion_ci(agree, s, n_boot=400, seed=r), cluster_proportion_ci(agree, None, n_boot=400, seed=r)
        hit["acc_prop"] += pc.ci_low <= truth["acc"] <= pc.ci_high
        hit["acc_iid"] += pi.ci_low <= truth["acc"] <= pi.ci_high
    cov = {k: v/R for k, v in hit.items()}
    # binomial sd of a 95% coverage estimate with R=250 is 0.014 (a 1000-replicate run gave 0.942 acc, 0.950 kappa): accept 0.90..0.99
    for k in ("acc", "kappa", "acc_prop"): assert 0.90 <= cov[k] <= 0.99, cov
    # design effect 1 + (3-1)*0.6 = 2.2: iid intervals are ~1/1.48 too narrow and cover ~80%
    assert cov["acc_iid"] < 0.88, cov


def test_cluster_wider_than_iid_for_duplicated_rows():
    "Each item copied 3 times: clustering recovers the width of the 1-copy data, the iid bootstrap is ~sqrt(3) too narrow."
    rng = np.random.default_rng(0)
    n = 400
    g = (rng.random(n) < 0.4).astype(int); p = np.where(rng.random(n) < 0.7, g, 1 - g)
    g3, p3, ids = np.tile(g, 3), np.tile(p, 3), np.tile(np.arange(n), 3)
    w = lambda t: (t.ci_high - t.ci_low).to_numpy()[:3]         # acc, kappa, mcc
    single = agreement_table(g, p, None, n_boot=2000, seed=1)
    clus = agreement_table(g3, p3, ids, n_boot=2000, seed=1)
    iid = agreement_table(g3, p3, None, n_boot=2000, seed=1)
    np.testing.assert_allclose(clus.estimate, single.estimate, equal_nan=True)
    # same cluster draws => the clustered CI on the copies equals the iid CI on the originals exactly
    np.testing.assert_allclose(w(clus), w(single), rtol=1e-12)
    ratio = w(clus)/w(iid)
    assert (ratio > 1.45).all() and (ratio < 2.0).all(), ratio
    pc, pi = cluster_proportion_ci(p3, ids, seed=1), cluster_proportion_ci(p3, None, seed=1)
    assert (pc.ci_high - pc.ci_low) > 1.45*(pi.ci_high - pi.ci_low)


def test_generic_bootstrap_matches_vectorised():
    rng = np.random.default_rng(5)
    g, p, s = simulate(rng, C=60)
    df = pd.DataFrame(dict(g=g, p=p, s=s))
    gen = cluster_bootstrap_ci(df, lambda d: {"acc": skm.accuracy_score(d.g, d.p), "mcc": skm.matthews_corrcoef(d.g, d.p)},
                               "s", n_boot=150, seed=3, method="percentile").set_index("metric")   # agreement_table's interval is the percentile one
    vec = agreement_table(g, p, s, n_boot=150, seed=3).set_index("metric")
    for m in ("acc", "mcc"):
        np.testing.assert_allclose(gen.loc[m, ["estimate", "ci_low", "ci_high"]].astype(float),
                                   vec.loc[m, ["estimate", "ci_low", "ci_high"]].astype(float), atol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_count_formulas_equal_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40)); q = rng.random()
    g, p = (rng.random(n) < rng.random()).astype(int), (rng.random(n) < q).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedStatWarning)
        ref = agreement_metrics(g, p)
    cm = confusion(g, p)
    got = metrics_from_counts(cm["tp"], cm["tn"], cm["fp"], cm["fn"])
    for m in METRICS: np.testing.assert_allclose(got[m], ref[m], atol=1e-12, equal_nan=True, err_msg=m)


def test_largest_remainder_is_the_allocation_both_studies_used():
    "The shared allocator gives exactly what normative._allocate and stop._largest_remainder gave (same maths, kept here as the reference)."
    from silverspoon.stats import largest_remainder
    def reference(sizes, k):   # the formula both studies carried before it moved to stats
        q = sizes / sizes.sum() * k
        base = np.floor(q).astype(int)
        order = (q - base).sort_values(ascending=False, kind="stable").index[:k - int(base.sum())]
        base[order] += 1
        return base
    rng = np.random.default_rng(7)
    for _ in range(200):
        sizes = pd.Series(rng.integers(1, 300, rng.integers(1, 46)))
        k = int(rng.integers(0, sizes.sum() + 1))
        got = largest_remainder(sizes, k)
        pd.testing.assert_series_equal(got, reference(sizes, k))
        assert int(got.sum()) == k and (got >= 0).all() and ((got - sizes / sizes.sum() * k).abs() < 1).all()


def test_prop_ci_names():
    pc = cluster_proportion_ci([0, 1, 1, 0, 1, 1, 0, 1, 1, 1], np.arange(10) % 5, n_boot=50)
    est, lo, hi = pc
    assert (lo, hi) == (pc.ci_low, pc.ci_high)
    assert not hasattr(pc, "lo") and not hasattr(pc, "hi")   # the deprecated aliases are gone
    assert set(pc.as_dict()) == {"estimate", "ci_low", "ci_high", "n_items", "n_clusters"}


# --- reference letters: two-group comparisons, word odds ratios, WEAT ---------------------------------------------------
import math
from collections import Counter
from scipy import stats as sst
from silverspoon.stats.groups import two_sample_t, paired_test, hedges_g, word_odds_ratios, weat
from silverspoon.stats import log_odds_ratio


def test_two_sample_t_matches_scipy_and_the_hedges_g_ci_covers():
    rng = np.random.default_rng(7)
    a, b = rng.normal(0.5, 0.1, 50), rng.normal(0.45, 0.15, 35)
    r = two_sample_t(a, b)
    assert math.isclose(r["t_student"], sst.ttest_ind(a, b).statistic) and math.isclose(r["p_welch"], sst.ttest_ind(a, b, equal_var=False).pvalue)
    assert (r["n_a"], r["n_b"]) == (50, 35) and math.isclose(r["diff"], a.mean() - b.mean())
    # Hedges' g approximate 95% CI covers the true standardised difference about 95% of the time (n = 20 + 20, delta = 0.5)
    hits = 0
    for _ in range(400):
        x, y = rng.normal(0.5, 1, 20), rng.normal(0, 1, 20)
        g = two_sample_t(x, y); hits += g["g_ci_low"] <= 0.5 <= g["g_ci_high"]
    assert 0.91 <= hits/400 <= 0.985, hits/400
    with pytest.raises(ValueError, match="`b` has 1 missing"): two_sample_t(a, [0.1, float("nan"), 0.3])


def test_stop_uses_the_stats_hedges_g():
    import silverspoon.studies.stop.stop as stop
    assert stop.hedges_g is hedges_g and "hedges_g" in stop.__all__


def test_paired_test_matches_scipy():
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 1, 40); a, b = base + rng.normal(0.03, 0.05, 40), base + rng.normal(0, 0.05, 40)
    r = paired_test(a, b)
    assert math.isclose(r["p_t"], sst.ttest_rel(a, b).pvalue) and math.isclose(r["p_wilcoxon"], sst.wilcoxon(a - b, zero_method="pratt").pvalue)
    assert r["diff_ci_low"] < r["mean_diff"] < r["diff_ci_high"] and math.isclose(r["cohens_dz"], (a - b).mean()/(a - b).std(ddof=1))
    with pytest.raises(ValueError, match="`b` has 1 missing"): paired_test(a[:3], [0.1, None, 0.2])


def test_word_odds_ratios_table():
    ca, cb = Counter(a=10, b=0, c=40, d=50), Counter(a=2, b=6, c=42, d=50)
    t = word_odds_ratios(ca, cb, min_count=1).set_index("word")
    Na, Nb = 100, 100
    assert math.isclose(t.loc["a", "or_paper"], (10/90)/(2/98)) and math.isnan(t.loc["b", "or_paper"])
    s = log_odds_ratio(10, 90, 2, 98)
    assert math.isclose(t.loc["a", "log_or"], s["log_or"]) and math.isclose(t.loc["a", "or_ci_high"], math.exp(s["ci_high"]))
    assert (t.p_bh >= t.pvalue - 1e-15).all() and list(word_odds_ratios(ca, cb, min_count=1).word[:1]) == ["a"]
    assert "a" not in word_odds_ratios(ca, cb, min_count=13).word.tolist()


def test_weat_exact_and_monte_carlo():
    rng = np.random.default_rng(11)
    A, B = rng.normal(size=(6, 10)) + 1.5*np.eye(10)[0], rng.normal(size=(6, 10)) - 1.5*np.eye(10)[0]
    X, Y = rng.normal(size=(6, 10)) + np.eye(10)[0], rng.normal(size=(6, 10)) - np.eye(10)[0]
    ex = weat(X, Y, A, B)                       # C(12, 6) = 924 partitions: exact
    assert ex["exact"] and ex["n_partitions"] == 924 and ex["effect_size"] > 1 and ex["p_one_sided"] < 0.01
    assert ex["p_one_sided"] >= 1/924 and (ex["n_X"], ex["n_Y"], ex["n_A"], ex["n_B"]) == (6, 6, 6, 6)
    mc = weat(X, Y, A, B, n_perm=500, seed=1)
    assert not mc["exact"] and mc["p_one_sided"] >= 1/501 and mc["effect_size"] == ex["effect_size"]
    assert weat(X, Y, A, B, n_perm=500, seed=1) == mc                      # seeded
    # under the null (random words) the one-sided p is roughly uniform
    ps = [weat(*(rng.normal(size=(4, 5)) for _ in range(4)))["p_one_sided"] for _ in range(200)]
    assert 0.35 < np.mean(ps) < 0.65 and 0.02 <= np.mean(np.array(ps) <= 0.05) <= 0.11


# --- the one bootstrap engine (`cluster_bootstrap`, issue 32 item 3) ---
from pathlib import Path
from silverspoon.stats import cluster_bootstrap, cluster_boot_weights, _cluster_draws, BootResult, BOOT_MIN_UNITS, MAX_UNDEFINED


def test_engine_loop_and_fast_path_share_the_draws():
    "A ratio of sums gives the same replicates one replicate at a time (row indices) and all at once (weights); both are `cluster_boot_weights`' stream."
    rng = np.random.default_rng(0)
    num, den = rng.integers(0, 5, 60).astype(float), rng.integers(1, 6, 60).astype(float)
    loop = cluster_bootstrap(lambda row: num[row].sum() / den[row].sum(), 60, n_boot=400, seed=9)
    fast = cluster_bootstrap(lambda W: (W @ num) / (W @ den), 60, n_boot=400, seed=9, additive=True)
    np.testing.assert_allclose(loop.replicates, fast.replicates, rtol=1e-12)
    W = cluster_boot_weights(60, 400, 9)
    np.testing.assert_array_equal(fast.replicates, (W @ num) / (W @ den))
    assert isinstance(loop, BootResult) and loop.n_boot == 400 and loop.seed == 9 and loop.note == "" and loop.n_units == 60
    assert loop.ci_low < num.sum() / den.sum() < loop.ci_high


def test_engine_strata_are_seeded_seed_plus_j():
    "A stratified bootstrap resamples each stratum on its own stream: stratum j is `_cluster_draws(C_j, n_boot, seed + j)`."
    a, b = np.arange(25.0), np.arange(30.0) * 2
    res = cluster_bootstrap(lambda ia, ib: a[ia].mean() - b[ib].mean(), (25, 30), n_boot=20, seed=4)
    da, db = next(_cluster_draws(25, 20, 4)), next(_cluster_draws(30, 20, 5))
    np.testing.assert_array_equal(res.replicates, a[da].mean(1) - b[db].mean(1))
    assert res.n_units == 25   # the policy counts the smallest stratum


@pytest.mark.parametrize("case", ["all-nan", "one-unit", "zero-variance", "some-undefined", "nan-estimate"])
def test_engine_junk_and_degenerate_input(case):
    "Junk in, an honest note out: undefined replicates counted, no interval below BOOT_MIN_UNITS units, none of zero width, none around a NaN estimate."
    if case == "all-nan":
        r = cluster_bootstrap(lambda row: np.nan, 40, n_boot=200)
        assert (r.n_undefined, r.n_defined) == (200, 0) and "200 of 200 bootstrap replicates undefined" in r.note
        assert np.isnan(r.ci_low) and np.isnan(r.ci).all()
    elif case == "one-unit":
        calls = []
        r = cluster_bootstrap(lambda row: calls.append(row) or 1.0, 1, n_boot=200)
        assert calls == [] and len(r.replicates) == 0 and r.note == f"no interval: 1 units < {BOOT_MIN_UNITS} for a bootstrap"
    elif case == "zero-variance":
        r = cluster_bootstrap(lambda W: W.sum(1) * 0 + 0.25, 40, n_boot=200, additive=True)
        assert r.note.endswith("(zero width)") and r.n_undefined == 0 and np.isnan(r.ci).all()
        noisy = cluster_bootstrap(lambda row: 0.25 + (row[0] % 2) * 6e-17, 40, n_boot=200)   # float noise is not a width
        assert noisy.note.endswith("(zero width)")
    elif case == "some-undefined":   # 1 in 10 replicates undefined: more than MAX_UNDEFINED, no interval; the count says so
        r = cluster_bootstrap(lambda row: np.nan if row[0] < 4 else float(row.mean()), 40, n_boot=1000, seed=1)
        assert r.n_undefined > MAX_UNDEFINED * 1000 and r.note.startswith(f"no interval: {r.n_undefined} of 1000")
        assert np.isfinite(r.ci_low)   # the raw percentile bounds stay, for callers that report them; `ci` hides them
    else:
        r = cluster_bootstrap(lambda row: {"d": 1.0}, 40, n_boot=20, estimate={"d": np.nan})
        assert r["d"].note == "no estimate"


def test_engine_checks_its_arguments():
    with pytest.raises(ValueError, match="n_boot"): cluster_bootstrap(lambda row: 1.0, 40, n_boot=0)
    with pytest.raises(ValueError, match="alpha"): cluster_bootstrap(lambda row: 1.0, 40, alpha=1.5)
    with pytest.raises(ValueError, match="returned a number"): cluster_bootstrap(lambda row: 1.0, 40, n_boot=5, estimate={"a": 1.0})


def test_every_bootstrap_goes_through_the_engine():
    "No module draws bootstrap replicates or takes percentile intervals of its own: `_cluster_draws`, `cluster_boot_weights` and `percentile_ci` are called in the stats package only (stats/, split by job in issue 53: agreement_table's vectorised path is in stats/agreement.py), and a seeded generator elsewhere is one of the known non-bootstrap uses."
    pkg = Path(__file__).resolve().parents[1] / "silverspoon"
    non_bootstrap_rng = {"instruments/audit.py": "the audit's sample of answers", "studies/stop/stop_finetune.py": "the validation split"}
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg).as_posix()
        if rel.startswith("stats/") or rel == "_modidx.py": continue
        src = f.read_text()
        for name in ("_cluster_draws(", "cluster_boot_weights(", "percentile_ci(", "rng.choice(pids"):
            assert name not in src, f"{rel} calls {name}: draw replicates with silverspoon.stats.cluster_bootstrap instead (one RNG stream, one policy)"
        if "default_rng(" in src:
            assert rel in non_bootstrap_rng, f"{rel} seeds its own generator: a bootstrap must use silverspoon.stats.cluster_bootstrap"


def test_the_stats_benchmark_finds_both_paths_equal():
    "benchmarks/bench_stats.py (small sizes): the row-by-row and the library paths of the wage median bootstrap and of the lexicon swap test give identical numbers (it asserts that); the times are printed, never asserted."
    import subprocess, sys
    from conftest import ROOT
    r = subprocess.run([sys.executable, str(ROOT/"benchmarks"/"bench_stats.py"), "--n-boot", "200", "--n-resamples", "199", "--repeat", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Both paths of each row gave identical numbers." in r.stdout and r.stdout.count("x\n") == 2, r.stdout


def test_policy_bootstrap_covers_a_skewed_mean_better_than_the_percentile_interval():
    "Issue 52: at the policy's 20 units the percentile interval of a log-normal mean covered ~0.86; the policy's BCa interval (hull with the expanded percentile) covers clearly more, and contains the percentile interval."
    from silverspoon.stats import cluster_bootstrap
    rng, truth, hit = np.random.default_rng(52), float(np.exp(0.5)), {"percentile": 0, "bca": 0}
    for r in range(300):
        x = rng.lognormal(size=20)
        b = {m: cluster_bootstrap(lambda W: (W @ x) / W.sum(1), 20, n_boot=1000, seed=r, estimate=float(x.mean()), additive=True, method=m) for m in hit}
        assert b["bca"].ci_low <= b["percentile"].ci_low and b["bca"].ci_high >= b["percentile"].ci_high
        for m in hit: hit[m] += b[m].ci_low <= truth <= b[m].ci_high
    assert b["bca"].method.startswith("BCa") and b["percentile"].method == "percentile cluster bootstrap"
    assert hit["percentile"] / 300 < 0.89 and hit["bca"] / 300 >= hit["percentile"] / 300 + 0.03, hit


def test_bca_matches_scipy_on_an_iid_mean():
    "`bca_ci` (no expansion, no hull) is Efron's BCa: scipy's on the same data, within Monte-Carlo error."
    from scipy import stats as sps
    from silverspoon.stats import bca_ci, cluster_boot_weights
    x = np.random.default_rng(7).exponential(size=30)
    lo, hi, k, how = bca_ci(cluster_boot_weights(30, 8000, 3) @ x / 30, x.mean(), (x.sum() - x) / 29, 0.05, hull=False)
    ref = sps.bootstrap((x,), np.mean, method="BCa", n_resamples=8000, random_state=3).confidence_interval
    assert how == "BCa" and k == 8000
    assert abs(lo - ref.low) < 0.03 and abs(hi - ref.high) < 0.05


def test_a_metric_is_checked_when_it_is_declared_and_nothing_registers_it():
    "issue 53 item 3: a `Metric` is plain data, refused when malformed (naming the fix); stats keeps no mutable registry filled at import."
    import silverspoon.stats as st
    from silverspoon.stats import Metric
    from silverspoon.stats.agreement import AGREEMENT_METRICS
    with pytest.raises(ValueError, match="give a definition .*fix the `Metric"): Metric("share", " ")
    with pytest.raises(ValueError, match=r"`scale` must be \(lowest, highest\), got \(1, 0\)"): Metric("share", "a share", scale=(1, 0))
    assert Metric("share", "a share", scale=[0, 1]).scale == (0, 1)
    assert not {"register_metric", "METRIC_REGISTRY", "METRIC_DEFINITIONS", "study_metrics", "metric_definition"} & set(dir(st))
    assert list(AGREEMENT_METRICS) == METRICS and AGREEMENT_METRICS["kappa"].scale == (-1, 1)
    tab = agreement_table([0, 1, 1, 0, 1], [0, 1, 0, 0, 1], n_boot=20)
    assert tab.definition.tolist() == [AGREEMENT_METRICS[m].definition for m in METRICS]
