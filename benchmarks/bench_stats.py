"""Two statistics paths of the reports, the row-by-row way and the library's way, side by side in one process.

1. The median of a name-clustered bootstrap (professions' `wage_table`): resampling the rows of a data frame per
   replicate (`cluster_bootstrap_ci`) vs the medians taken from the replicates' name counts (`stats.weighted_median`
   over `cluster_boot_weights`).
2. The lexicon counts and the within-pair swap test of letters' `lexicon_odds_ratios`: every token matched against
   every stem, and the statistic recomputed one swap pattern at a time, vs each distinct word matched once and the swap
   patterns evaluated as matrix products (`gender_swap_test(batched=True)`), on the 120 released CLG letters.

Each pair must give the same numbers (checked here, exactly); the ratio of their times is the result. Timings vary
with the machine and its load: run both paths in the same process, as this script does, and compare the ratio.

    SILVERSPOON_DATA=../shared/data .venv/bin/python benchmarks/bench_stats.py [--n-boot 2000] [--repeat 3]
"""
import argparse, time
import numpy as np, pandas as pd

def best_of(fn, repeat:int)->tuple[float, object]:
    "The fastest of `repeat` calls of `fn` (seconds) and its last result."
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter(); out = fn(); times.append(time.perf_counter() - t)
    return min(times), out

def wage_frame(n_names:int=40, per_name:int=5, seed:int=0)->pd.DataFrame:
    "One cell of answers as `wage_table` sees it: names, string columns beside the wage (they are what a row resample copies)."
    rng = np.random.default_rng(seed)
    names = np.repeat([f"name{i}" for i in range(n_names)], per_name)
    return pd.DataFrame({"name": names, "city": rng.choice(["Austin, Texas", "Boston, Massachusetts"], len(names)),
                         "profession": rng.choice(["nurse", "teacher", "software engineer", "cook"], len(names)),
                         "wage": rng.choice([31000.0, 48526.4, 49857.6, 60990.0, 120000.0], len(names))})

def median_by_rows(s:pd.DataFrame, n_boot:int):
    from silverspoon.stats import cluster_bootstrap_ci
    r = cluster_bootstrap_ci(s, lambda d: {"median": float(d.wage.median())}, cluster="name", n_boot=n_boot, seed=0).iloc[0]
    return r.ci_low, r.ci_high

def median_by_counts(s:pd.DataFrame, n_boot:int):
    from silverspoon.stats import cluster_bootstrap, weighted_median
    w, (codes, names) = s.wage.to_numpy(float), pd.factorize(s.name, sort=True)
    b = cluster_bootstrap(lambda W: weighted_median(w, W[:, codes]), len(names), n_boot, 0, estimate=float(np.median(w)), additive=True, always_draw=True)
    return b.ci_low, b.ci_high

def lexicon_by_tokens(letters:pd.DataFrame, n_resamples:int):
    "The letters' trait counts and swap p the way they were computed before: every token against every stem, one swap pattern at a time."
    from silverspoon.studies.letters.letters import TRAITS, STARRED_STEMS, letter_tokens, trait_matcher, load_lexicons, gender_swap_test
    lex, toks = load_lexicons(), [letter_tokens(t) for t in letters.letter]
    n_tok = np.array([len(t) for t in toks], dtype=np.float64)
    H = {trait: np.array([sum(map(trait_matcher(lex[key], "faithful", STARRED_STEMS[trait]), t)) for t in toks], dtype=np.float64) for trait, key in TRAITS.items()}
    def log_ors(male):
        Nm, Nf = n_tok[male].sum(), n_tok[~male].sum()
        return {t: float(np.log((h[male].sum() + 0.5) / (Nm - h[male].sum() + 0.5)) - np.log((h[~male].sum() + 0.5) / (Nf - h[~male].sum() + 0.5))) for t, h in H.items()}
    sw = gender_swap_test(letters.gender.to_numpy(), letters.pair_id.to_numpy(), log_ors, n_resamples, 0)
    return {t: H[t].sum() for t in H}, {t: sw[t]["p"] for t in TRAITS}

def lexicon_by_words(letters:pd.DataFrame, n_resamples:int):
    from silverspoon.studies.letters.letters import lexicon_odds_ratios
    o = lexicon_odds_ratios(letters, "faithful", n_boot=20, n_resamples=n_resamples).set_index("trait")
    return {t: float(o.a_m[t] + o.a_f[t]) for t in o.index}, {t: o.p_swap[t] for t in o.index}

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-boot", type=int, default=2000); ap.add_argument("--n-resamples", type=int, default=9999)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    from silverspoon.studies.letters.letters import load_clg_letters
    rows = []
    s = wage_frame()
    t_rows, r_rows = best_of(lambda: median_by_rows(s, a.n_boot), a.repeat)
    t_counts, r_counts = best_of(lambda: median_by_counts(s, a.n_boot), a.repeat)
    assert r_rows == r_counts, (r_rows, r_counts)   # the same interval, to the last digit
    rows.append(("median bootstrap, 40 names x 5 rows", f"{a.n_boot} replicates", t_rows, t_counts))
    clg = load_clg_letters()
    letters = pd.DataFrame({"letter": clg.letter, "gender": np.where(np.arange(len(clg)) % 2 == 0, "m", "f"), "pair_id": np.arange(len(clg)) // 2})
    t_tok, r_tok = best_of(lambda: lexicon_by_tokens(letters, a.n_resamples), 1)
    t_word, r_word = best_of(lambda: lexicon_by_words(letters, a.n_resamples), 1)
    assert r_tok[0] == r_word[0] and all(r_tok[1][t] == r_word[1][t] or (np.isnan(r_tok[1][t]) and np.isnan(r_word[1][t])) for t in r_tok[1]), (r_tok, r_word)
    rows.append((f"lexicon counts + swap test, {len(letters)} CLG letters", f"{a.n_resamples} patterns", t_tok, t_word))
    print(f"{'what':<48}{'size':>18}{'row by row (s)':>16}{'library (s)':>13}{'ratio':>8}")
    for what, size, slow, fast in rows: print(f"{what:<48}{size:>18}{slow:>16.3f}{fast:>13.3f}{slow / fast:>7.0f}x")
    print("Both paths of each row gave identical numbers.")

if __name__ == "__main__": main()
