"""SmolLM2-135M at the papers' scale on this machine's CPU (issue 55): what the paper-scale runs cost and what they bought.

A record, not a test. For each committed paper-scale run (`params/<study>/smollm2-135m-paper.yaml`) and its default
pilot (`params/<study>/smollm2-135m.yaml`), read from the committed store (`engine.cost.run_cost`: generations and the
wall time estimated from the batches' timestamps) and the published reports:
- generations, wall minutes and generations per second of the pilot and of the paper-scale run, side by side;
- the CPU time the pilot predicts for the paper scale (its rate x the paper's generations: what `plan` does for a
  `device: cpu` model file) against the wall time the paper-scale run took;
- per card headline, the MDE `plan` predicted for the paper scale before the run (SD per unit from the released
  answers; and from the pilot's own SE, `plan --pilot`), both at two-sided alpha 0.05 and 80% power over the paper's
  units, against the MDE the run achieved: its own bootstrap SE (the card's `se`) x (z_0.975 + z_0.8), over the units it
  actually answered, and the card's own MDE at the alpha its verdict uses.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_paper_scale.py

Writes benchmarks/results/paper_scale_cost.csv and paper_scale_mde.csv and prints both.
"""
import pathlib
import numpy as np, pandas as pd
from scipy.stats import norm
from silverspoon.core import project_root
from silverspoon.engine.cost import run_cost
from silverspoon.site.plan_page import plan_table

ROOT = project_root(); OUT = ROOT/"benchmarks"/"results"
MODEL, STUDIES = ROOT/"params"/"models"/"smollm2-135m.yaml", ("normative", "stop")
Z = norm.ppf(0.975) + norm.ppf(0.8)

def cost_rows()->pd.DataFrame:
    rows = []
    for s in STUDIES:
        pilot, paper = (run_cost(ROOT/"store", s, r) for r in ("smollm2-135m", "smollm2-135m-paper"))
        rate = pilot["generations"]/pilot["wall_seconds"]
        rows.append(dict(study=s, pilot_generations=pilot["generations"], pilot_wall_min=round(pilot["wall_seconds"]/60, 1),
                         pilot_gen_per_s=round(rate, 3), paper_generations=paper["generations"],
                         paper_wall_min=round(paper["wall_seconds"]/60, 1), paper_gen_per_s=round(paper["generations"]/paper["wall_seconds"], 3),
                         predicted_from_pilot_min=round(paper["generations"]/rate/60, 1),
                         predicted_over_measured=round(paper["generations"]/rate/paper["wall_seconds"], 2)))
    return pd.DataFrame(rows)

def mde_rows()->pd.DataFrame:
    released = plan_table(MODEL, "paper").get("headlines").set_index("headline")
    pilot = plan_table(MODEL, "paper", pilot="smollm2-135m").get("headlines").set_index("headline")
    card = pd.read_csv(ROOT/"reports"/"models"/"smollm2-135m"/"bias_card.csv")
    rows = []
    for c in card[card.study.isin(STUDIES)].itertuples():
        h = c.headline if hasattr(c, "headline") else c.metric
        if h not in released.index: continue
        se = getattr(c, "se", np.nan)
        rows.append(dict(study=c.study, headline=h, run=getattr(c, "run", ""), units_paper=released.loc[h, "n_paper"] if "n_paper" in released else np.nan,
                         units_answered=getattr(c, "n_units", np.nan),
                         mde_predicted_released_sd=released.loc[h, "mde_paper"], mde_predicted_pilot_se=pilot.loc[h, "mde_paper"],
                         mde_achieved_alpha_05=Z*se if pd.notna(se) else np.nan,
                         mde_card=getattr(c, "mde_80", np.nan), card_alpha=getattr(c, "mde_alpha", np.nan), tier=getattr(c, "verdict", "")))
    return pd.DataFrame(rows)

if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    c, m = cost_rows(), mde_rows()
    c.to_csv(OUT/"paper_scale_cost.csv", index=False); m.to_csv(OUT/"paper_scale_mde.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(c.to_string(index=False)); print(); print(m.round(4).to_string(index=False))
