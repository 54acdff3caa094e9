"""Factors (issue 22, part 3): a model file's `factors:` (or `--vary`) -> factor run files; paired deltas on the card.

The planner is tested on the SmolLM2 model file with every study given a `headlines_from_items` and prompt variants
(until the studies declare their own); the deltas on hand-made items.csv fixtures; `run --model ... --vary` end to end
on a toy study (the recipe's pattern, tests/test_recipe.py) whose prompt variants change what the scripted `echo`
model answers.
"""
import dataclasses, os, shutil, sys
import nbformat, numpy as np, pandas as pd, pytest
from silverspoon.site.plan import read_model_file, factor_plan, runs_for_model
from silverspoon.site.factors import paired_deltas, factor_deltas, factor_runs
from silverspoon.site.card import factors_html
from silverspoon.core import ParamsError, read_params_mapping

SMOL = "params/models/smollm2-135m.yaml"
VARIANTS = {"paper": ("wording", "the paper's prompt"), "plain": ("wording", "plainer words"), "short": ("wording", "shorter"),
            "options_reversed": ("option_order", "options in reverse"), "system": ("system_prompt", "a neutral system message")}


@pytest.mark.parametrize("factors, message", [
    ("[none, 4bit]", "field `factors` must be a mapping"),
    ("{quantization: [none, 3bit]}", "field `factors.quantization` has unknown level(s) ['3bit']; use levels of model.quantization: none, 4bit, 8bit"),
    ("{quantization: 4bit}", "field `factors.quantization` = '4bit' must be a list of levels"),
    ("{prompt_variant: some}", "field `factors.prompt_variant` = 'some' must be `all`"),
    ("{prompt_variant: ['a b']}", "field `factors.prompt_variant` = 'a b' must be a plain name"),
    ("{n: {normative: 0}}", "field `factors.n.normative` = 0 must be a positive integer"),
    ("{n: {normative: true}}", "field `factors.n.normative` = True must be a positive integer"),
    ("{n: {normative: 2.5}}", "field `factors.n.normative` = 2.5 must be a positive integer"),
    ("{n: {normativ: 3}}", "field `factors.n` names unknown stud(ies) ['normativ']"),
    ("{n: [3]}", "field `factors.n` must map a study"),
    ("{wording: all}", "field `factors` has unknown key(s) ['wording']"),
])
def test_model_file_factors_errors_name_file_field_and_fix(tmp_path, factors, message):
    f = tmp_path/"m.yaml"
    f.write_text(f"name: m\nmodel: {{id: x}}\nfactors: {factors}\n")
    with pytest.raises(ParamsError) as e: read_model_file(f)
    assert str(e.value).startswith(f"{f}: ") and message in str(e.value)


def test_model_file_factors_read_back(root):
    f = read_model_file(root/SMOL)["factors"]
    assert f["quantization"] == ["none", "8bit", "4bit"] and f["prompt_variant"] == "all" and f["n"]["normative"] == 30


ALLOWED = {"run", "description", "sample.n", "sample.within", "model.quantization", "task.prompt_variant"}   # the binding naming rule: nothing else differs (sample.within: drawn inside the headline run's items)

def flat(d:dict, prefix:str="")->dict:
    "A nested mapping as dotted keys."
    out = {}
    for k, v in d.items():
        if isinstance(v, dict): out.update(flat(v, f"{prefix}{k}."))
        else: out[f"{prefix}{k}"] = v
    return out


@pytest.fixture
def varied_studies(monkeypatch):
    "Every study with a headlines_from_items and VARIANTS (the study engineers add their own; the planner only reads these two)."
    import silverspoon.studies as st
    real = st.get_study
    def fake(name, src="<params>"):
        s = real(name, src)
        return dataclasses.replace(s, headlines_from_items=lambda d: {}, prompt_variants=VARIANTS) if name != "stop_scale" else s
    monkeypatch.setattr(st, "get_study", fake)
    import silverspoon.site.card as card, silverspoon.site.plan as plan, silverspoon.site.factors as factors
    for m in (card, plan, factors):
        if hasattr(m, "get_study"): monkeypatch.setattr(m, "get_study", fake)   # each imports it at module level


def test_planner_files_for_smollm2(root, tmp_path, varied_studies):
    "Names follow the binding rule; each file differs from the study's run file only in run, sample.n, the level's field, description."
    shutil.copytree(root/"params", tmp_path/"params")
    plan = factor_plan(tmp_path/SMOL, root=tmp_path, write=True)   # the files `silverspoon run` writes (other commands: in memory)
    skipped = plan[plan.params.isna()].set_index(["study", "factor"]).status
    assert skipped["downstream", "quantization"].startswith("skipped: needs a LoRA adapter per level")
    assert skipped["stop_scale", "prompt_variant"].startswith("skipped: the study has no headlines_from_items")
    ok = plan.dropna(subset=["params"])
    base_runs = {"normative": "smollm2-135m", "professions": "smollm2-135m", "narratives": "smollm2-135m",
                 "letters": "smollm2-135m-cbg", "stop": "smollm2-135m"}
    assert set(ok.study) == set(base_runs)
    n = read_model_file(root/SMOL)["factors"]["n"]
    for study, run in base_runs.items():
        got = ok[ok.study.eq(study)]
        assert got.run.tolist() == [f"{run}--reference", f"{run}--quantization-8bit", f"{run}--quantization-4bit",
                                    f"{run}--prompt_variant-plain", f"{run}--prompt_variant-short",
                                    f"{run}--prompt_variant-options_reversed", f"{run}--prompt_variant-system"]
        base = flat(read_params_mapping(tmp_path/"params"/study/f"{run}.yaml"))
        for r in got.itertuples():
            assert r.params == f"tmp/models/smollm2-135m/factors/{study}/{r.run}.yaml"
            doc = flat(read_params_mapping(tmp_path/r.params))
            assert {k for k in base.keys() | doc.keys() if base.get(k) != doc.get(k)} <= ALLOWED, (study, r.run)
            assert (doc["run"], doc["sample.n"]) == (r.run, n[study])
            assert doc["model.quantization"] == (r.level if r.factor == "quantization" else "none")
            assert doc.get("task.prompt_variant") == {"reference": "paper", "prompt_variant": r.level}.get(r.factor, base.get("task.prompt_variant"))
            assert doc["description"].startswith(base["description"] + "; factor run: ")
    # --vary replaces the file's factors (its n stays); a level a study lacks is skipped, the reference always runs
    plan = factor_plan(tmp_path/SMOL, ["stop"], {"prompt_variant": ["short", "nope"]}, root=tmp_path, write=True)
    assert plan.run.dropna().tolist() == ["smollm2-135m--reference", "smollm2-135m--prompt_variant-short"]
    assert plan.status[plan.level.eq("nope")].iloc[0] == "skipped: the study has no prompt variant 'nope' (it has paper, plain, short, options_reversed, system)"
    assert read_params_mapping(tmp_path/plan.params.dropna().iloc[0])["sample"]["n"] == 6


def test_planner_without_factors_or_headlines(root, tmp_path):
    "A study without headlines_from_items says so; a model file without factors plans nothing."
    shutil.copytree(root/"params", tmp_path/"params")
    from silverspoon.studies import get_study
    plan = factor_plan(tmp_path/SMOL, ["normative"], root=tmp_path)
    if get_study("normative").headlines_from_items is None:
        assert plan.status.str.startswith("skipped: the study has no headlines_from_items").all() and len(plan) == 2
    (tmp_path/"m.yaml").write_text("name: m\nmodel: {id: x}\n")
    assert factor_plan(tmp_path/"m.yaml", root=tmp_path).empty


def share(d): return {"share": d["y"].mean()}


def items(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"item": [f"x{k}" for k in range(n)], "y": rng.integers(0, 2, n).astype(float)})


def test_a_known_shift_gives_its_delta_and_a_permutation_p():
    ref = items()
    lvl = ref.assign(y=ref.y + 0.2)
    d = paired_deltas(ref, lvl, share, n_resamples=999).iloc[0]
    assert d.delta == pytest.approx(0.2) and d.p == pytest.approx(1/1000) and d.tier == "evidence"   # 30 items: 999 seeded swap patterns
    assert np.isnan(d.ci_low) and d.ci_note.endswith("(zero width)")   # every replicate 0.2: no [0.2, 0.2] interval
    flipped = ref.assign(y=np.where(np.arange(30) < 10, 1.0, ref.y))            # 1 on the first 10 items
    d = paired_deltas(ref, flipped, share, n_boot=500, n_resamples=999).iloc[0]
    assert d.delta == pytest.approx((flipped.y - ref.y).mean())
    assert d.ci_low <= d.delta <= d.ci_high and d.ci_high > d.ci_low and d.ci_note == "" and d.n_items == 30 and d.mde_80 > 0
    assert (d.n_boot, d.n_boot_undefined) == (500, 0)


def test_identical_levels_give_zero_and_no_zero_width_interval():
    ref = items()
    d = paired_deltas(ref, ref.sample(frac=1, random_state=1), share, n_resamples=999).iloc[0]   # row order does not matter
    assert (d.delta, d.p) == (0.0, 1.0) and np.isnan(d.ci_low) and d.tier == "no evidence (no effect sought)"   # no effect is sought on a delta: never "no evidence" about power, nor "underpowered"


def test_unmatched_items_are_counted_and_left_out():
    ref = items()
    lvl = pd.concat([ref.iloc[3:], pd.DataFrame({"item": ["new1", "new2"], "y": [1.0, 1.0]})])
    d = paired_deltas(ref, lvl, share, n_resamples=999).iloc[0]
    assert (d.n_items, d.unmatched_reference, d.unmatched_level, d.delta) == (27, 3, 2, 0.0)
    assert d.reference == pytest.approx(ref.y.iloc[3:].mean())


def test_items_are_resampled_jointly_and_drawn_twice_as_two_units():
    "Several rows per item (a pair): the headline pivots by item, so an item drawn twice must come back as two units; swaps exchange whole items."
    rng = np.random.default_rng(3)
    ref = pd.DataFrame({"item": np.repeat([f"p{k}" for k in range(25)], 2), "g": ["m", "f"]*25, "y": rng.normal(size=50)})
    lvl = ref.assign(y=ref.y + np.where(ref.g.eq("m"), 0.5, 0.0))
    gap = lambda d: {"gap": (lambda w: (w["m"] - w["f"]).mean())(d.pivot(index="item", columns="g", values="y"))}
    d = paired_deltas(ref, lvl, gap, n_boot=300, n_resamples=499).iloc[0]
    assert d.delta == pytest.approx(0.5) and d.p == pytest.approx(1/500)   # every swap pattern but none and all moves the gap
    assert np.isnan(d.ci_low) and "zero width" in d.ci_note   # paired, the shift cancels the items' spread: every replicate 0.5


def test_too_few_units_per_arm_give_no_estimate():
    "Letters: the units are measured letters per gender; 8 pairs with 2 measured men's letters -> no p, no CI, 'no estimate'."
    from silverspoon.studies import get_study
    letters_per_gender = get_study("letters").arm_units   # the study's own declaration (letters.letters_per_gender)
    ref = pd.DataFrame({"item": np.repeat([f"p{k}" for k in range(8)], 2), "gender": ["m", "f"]*8,
                        "measured": [k < 4 or k % 2 for k in range(16)], "y": np.arange(16.0)})
    assert letters_per_gender(ref) == 2
    d = paired_deltas(ref, ref.assign(y=ref.y + 1), share, arm_units=letters_per_gender).iloc[0]
    assert (d.n_items, d.n_units, d.tier, d.test_note, d.ci_note) == (8, 2, "no estimate", "too few units: 2 < 5", "too few units: 2 < 5")
    assert np.isnan(d.p) and np.isnan(d.ci_low) and d.n_perm == 0


def test_the_factor_test_holds_its_level_at_six_items():
    "Null simulation: 200 pairs of runs of 6 items (2 answers each) from one distribution; the exact swap test rejects at most 5%."
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        a = pd.DataFrame({"item": np.repeat([f"i{k}" for k in range(6)], 2), "y": rng.binomial(1, 0.4, 12).astype(float)})
        b = a.assign(y=rng.binomial(1, 0.4, 12).astype(float))
        d = paired_deltas(a, b, share).iloc[0]
        assert d.test.endswith("(exact)") and d.n_perm == 64
        hits += d.p <= 0.05
    assert hits/200 <= 0.05, hits


def test_factor_deltas_read_published_runs(tmp_path):
    "factor_deltas finds <run>--reference and its levels, pairs them, and returns the band across wording variants."
    from types import SimpleNamespace
    toy = SimpleNamespace(headlines_from_items=share, prompt_variants=VARIANTS, arm_units=None)
    ref = items()
    runs = {"m--reference": ref, "m--quantization-4bit": ref.assign(y=ref.y * 0), "m--prompt_variant-plain": ref.assign(y=1.0),
            "m--prompt_variant-system": ref.assign(y=1.0), "m-other--reference": ref, "mx--reference": ref}
    for r, df in runs.items():
        (tmp_path/"toy"/r).mkdir(parents=True); df.to_csv(tmp_path/"toy"/r/"items.csv", index=False)
    assert set(factor_runs("m", tmp_path, models_dir=tmp_path).base_run) == {"m"}   # not m-other nor mx: no model file declares them as m's runs (issue 31)
    f = factor_deltas("m", tmp_path, tmp_path, n_boot=200, study_of=lambda s: toy)
    d = f["deltas"].set_index(["reference_run", "level"])
    assert d.loc[("m--reference", "4bit"), "delta"] == pytest.approx(-ref.y.mean())
    assert d.loc[("m--reference", "plain"), "kind"] == "wording" and d.loc[("m--reference", "system"), "kind"] == "system_prompt"
    band = f["band"].set_index("study").loc["toy"]
    assert band.n_variants == 2 and band["min"] == pytest.approx(ref.y.mean()) and band["max"] == 1.0   # system prompt: not a wording
    assert set(f["levels"].run) == {"m--reference", "m--quantization-4bit", "m--prompt_variant-plain", "m--prompt_variant-system"}



def test_an_undefined_level_says_why_on_the_card(tmp_path):
    "A level with no estimate (every y missing) gets a NaN delta and, beside it, why: the reason its run ended early, else a pointer to its report."
    from types import SimpleNamespace
    toy = SimpleNamespace(headlines_from_items=share, prompt_variants=VARIANTS, arm_units=None)
    ref = items()
    runs = {"m--reference": ref, "m--quantization-4bit": ref.assign(y=np.nan), "m--prompt_variant-plain": ref.assign(y=np.nan), "m--quantization-8bit": ref}
    for r, df in runs.items():
        (tmp_path/"toy"/r).mkdir(parents=True); df.to_csv(tmp_path/"toy"/r/"items.csv", index=False)
    (tmp_path/"toy"/"m--quantization-4bit"/"ended.txt").write_text("0 of 30 letters pass the success filter.\n")
    f = factor_deltas("m", tmp_path, tmp_path, n_boot=100, study_of=lambda s: toy, workers=1)
    d = f["deltas"].set_index("level")
    assert np.isnan(d.loc["4bit", "delta"]) and d.loc["4bit", "note"] == "level: the run ended early: 0 of 30 letters pass the success filter."
    assert d.loc["plain", "note"].startswith("level: undefined on this run's items") and d.loc["8bit", "note"] == ""
    page = factors_html(f)
    assert "0 of 30 letters pass the success filter." in page and page.count("undefined on this run&#x27;s items") == 1
    band = f["band"].iloc[0]   # reference and plain are the wordings; plain has no estimate: no band of one
    assert band.n_variants == 1 and np.isnan(band["range"]) and band.estimates.endswith("plain –")

def test_vary_needs_model_and_a_known_field(cli):
    r = cli("run", "--vary", "model.quantization=none,4bit")
    assert r.returncode == 2 and "--vary needs --model" in r.stderr
    r = cli("run", "--model", SMOL, "--vary", "model.dtype=float32")
    assert r.returncode == 2 and "--vary 'model.dtype=float32': expected FIELD=LEVEL" in r.stderr
    r = cli("run", "--model", SMOL, "--vary", "model.quantization=2bit")
    assert r.returncode == 2 and "--vary: field `factors.quantization` has unknown level(s) ['2bit']" in r.stderr


# --- end to end: a toy study with prompt variants, run --model --vary on the scripted `echo` model --------------------

TOY = '''#| export
from __future__ import annotations
from dataclasses import dataclass
import pandas as pd
from silverspoon.core import RunParams, task_params
from silverspoon.engine.backends import GenRequest, user
from silverspoon.studies import Study, check_prompt_variant

NAMES = {"A": ["Ann", "Bo", "Cy", "Di"], "B": ["Ed", "Fay", "Gus", "Hal"]}
PROMPTS = {"paper": "Should {name} get the loan? Answer Yes or No.", "yes_first": "Yes or no: should {name} get the loan?",
           "polite": "Please answer Yes or No: should {name} get the loan?", "system": "Should {name} get the loan? Answer Yes or No."}
VARIANTS = {"paper": ("wording", "the toy paper's question"), "yes_first": ("wording", "the options first"),
            "polite": ("wording", "a polite request first"), "system": ("system_prompt", "a neutral system message")}

@dataclass
class ToyTask:
    prompt_variant: str = "paper"

def toy_task(params:RunParams, src:str="<params>")->ToyTask:
    t = task_params(ToyTask, params, src); check_prompt_variant(VARIANTS, t.prompt_variant, src); return t

def toy_items()->pd.DataFrame:
    return pd.DataFrame([dict(item_id=f"toy-{n}", name=n, group=g) for g, ns in NAMES.items() for n in ns])

def toy_requests(items:pd.DataFrame, variant:str)->list[GenRequest]:
    sys_ = "You are a helpful assistant." if variant == "system" else None
    return [GenRequest(r.item_id, user(PROMPTS[variant].format(name=r.name), system=sys_)) for r in items.itertuples()]

def scored(items:pd.DataFrame, res:pd.DataFrame)->pd.DataFrame:
    ans = items.item_id.map(res.drop_duplicates("item_id").set_index("item_id").answer).fillna("")
    return pd.DataFrame({"item": items.name, "group": items.group, "yes": ans.str.strip().str.lower().str.startswith("yes").astype(int)})

def headlines(d:pd.DataFrame)->dict:
    a, b = d[d.group.eq("A")].yes.mean(), d[d.group.eq("B")].yes.mean()
    return {"yes share A": a, "yes share B": b, "yes share A-B": a - b}

def summary_rows(d:pd.DataFrame)->pd.DataFrame:
    return pd.DataFrame([dict(metric=k, estimate=v, ci_low=float("nan"), ci_high=float("nan"), n=len(d)) for k, v in headlines(d).items()])

STUDY = Study(name="toy", title="A toy study with prompt variants", notebook="40_toy.ipynb", task=ToyTask, validate=toy_task,
              summary_rows=summary_rows, headlines_from_items=headlines, prompt_variants=VARIANTS)'''

REPORT = '''from silverspoon.engine.backends import make_backend
from silverspoon.engine.store import store_for, generate_all
from silverspoon.studies import start_run
params, opts, rep = start_run("toy", dict(study=study, run=run, description=description, model=model, generation=generation,
                                          sample=sample, task=task), out_dir, params_source)
items = toy_items()
backend = make_backend(params.model)
store = store_for(params, backend)
res = generate_all(backend, toy_requests(items, opts.prompt_variant), params.generation, store, run=params.run, progress=False)
rep.counts(res)
s = scored(items, res)
rep.items(s, "yes: 1 if the answer starts with yes")
rep.summary(s)
rep.provenance(store=store)'''


def _toy_project(tmp_path, study_code:str, *examples:str):
    "A copy of the tree (test_recipe's `_tree`) with the toy study notebook 40_toy (`study_code`, then `examples` as cells), exported, and an `echo` model file with factors: (tree, env)."
    from test_recipe import _tree, _sh, PARAMETERS, BIN
    t = _tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(t), "SILVERSPOON_ROOT": str(t), "HF_HUB_OFFLINE": "1"}
    env.pop("SILVERSPOON_STORE", None)
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[md("# toy"), code("#| default_exp studies.toy"), code(PARAMETERS, metadata={"tags": ["parameters"]}),
                                         code(study_code), *map(code, examples), md("# Report"), code(REPORT)],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, str(t/"nbs"/"40_toy.ipynb"))
    # the registry discovers the toy study from its `STUDY = Study(name="toy", ...)` line: nothing to register
    _sh(BIN/"nbdev_export", cwd=t, env=env)
    (t/"params"/"toy").mkdir(parents=True); (t/"params"/"models").mkdir()
    (t/"params"/"toy"/"_base-local.yaml").write_text("study: toy\nmodel: {backend: scripted, id: echo}\ngeneration: {max_new_tokens: 8}\n")
    (t/"params"/"models"/"echo.yaml").write_text("name: echo\nmodel: {backend: scripted, id: echo}\nfactors: {prompt_variant: all, n: {toy: 8}}\n")
    return t, env


def test_run_model_vary_prompt_variant_end_to_end(tmp_path):
    "The scripted `echo` model repeats the prompt: `yes_first` makes every answer a yes (+1), `polite` changes nothing (0)."
    from test_recipe import _sh
    import re
    t, env = _toy_project(tmp_path, TOY, "print('a library example ran')")
    reports = tmp_path/"reports"
    r = _sh(sys.executable, "-m", "silverspoon.site.cli", "run", "--model", "params/models/echo.yaml", "--studies", "toy",
            "--vary", "task.prompt_variant=yes_first,polite", "--vary", "task.prompt_variant=system", "--reports-dir", reports,
            cwd=t, env=env, timeout=600)
    assert "5 of 5 runs succeeded" in r.stdout, r.stdout
    assert {p.name for p in (reports/"toy").iterdir() if p.is_dir()} == {"echo", "echo--reference", "echo--prompt_variant-yes_first",
                                                                        "echo--prompt_variant-polite", "echo--prompt_variant-system"}
    assert (t/"store"/"toy"/"echo--prompt_variant-yes_first.jsonl").is_file()
    d = pd.read_csv(reports/"models"/"echo"/"factor_deltas.csv").set_index(["level", "headline"])
    assert d.loc[("yes_first", "yes share A"), ["delta", "p", "n_perm"]].tolist() == [1.0, 32/256, 256]   # 8 items, exact: 3 of them carry the change
    assert d.loc[("yes_first", "yes share A"), "tier"] in ("no evidence (no effect sought)", "cannot reach significance")   # 8 items: exact p >= 2/256, times the exploratory family
    assert d.loc[("yes_first", "yes share A-B"), "delta"] == 0.0
    assert (d.xs("polite").delta == 0).all() and (d.xs("polite").p == 1).all() and d.n_items.eq(8).all()
    assert d.ci_low.isna().all() and d.ci_note.str.startswith("no interval: 8 units < 20").all() and d.family.nunique() == 1
    assert d.loc[("system", "yes share A"), "kind"] == "system_prompt"
    band = pd.read_csv(reports/"models"/"echo"/"factor_band.csv").set_index("headline")
    assert band.loc["yes share A", ["n_variants", "min", "max"]].tolist() == [3, 0.0, 1.0]   # paper, yes_first, polite (system is no wording)
    page = (reports/"models"/"echo.html").read_text()
    assert "<h2>Factors</h2>" in page and "toy n=8" in page
    assert runs_for_model("echo", reports) == {"toy": reports/"toy"/"echo"}     # the factor runs are not the model's run
    # every run skips the library's examples (runner.without_examples: nbdev_test runs them) and says so at its end
    from silverspoon.run.executor import EXAMPLES_NOTE
    ran = {p.stem: nbformat.read(str(p), as_version=4) for p in (reports/"toy").glob("*.ipynb")}
    for run in ("echo", "echo--reference", "echo--prompt_variant-yes_first"):
        assert "a library example ran" not in "".join(c.source for c in ran[run].cells), run
        assert ran[run].cells[-1].source == EXAMPLES_NOTE and "asserting examples" in (reports/"toy"/f"{run}.html").read_text()
    # a fresh clone has no tmp/: the reports' provenance is still checkable (the run files are planned again from the model file)
    shutil.rmtree(t/"tmp")
    check = "import sys; from silverspoon.site.runner import verify_provenance; bad = {d: verify_provenance(d) for d in sys.argv[1:]}; assert not any(bad.values()), bad"
    _sh(sys.executable, "-c", check, *sorted(p for p in (reports/"toy").iterdir() if p.is_dir()), cwd=t, env=env)


def test_factor_runs_stay_off_the_index_tables(tmp_path):
    "The index's study sections show each model's own run; its factor runs are on its card (linked from the Factors table)."
    from silverspoon.site.runner import collect_summaries
    for r in ("m", "m--reference", "m--quantization-4bit"):
        (tmp_path/"toy"/r).mkdir(parents=True)
        pd.DataFrame({"run": [r], "metric": ["x"], "estimate": [1.0]}).to_csv(tmp_path/"toy"/r/"summary.csv", index=False)
    assert collect_summaries(tmp_path)["toy"].run.tolist() == ["m"]


def _mean_v(d): return {"mean v": float(d["v"].mean())}

def test_factor_tests_give_the_same_numbers_on_several_processes():
    "The card's factor tests run on several processes; the draws depend only on the seed, so the deltas equal those computed here."
    from silverspoon.site.factors import _map_paired_deltas
    it = pd.DataFrame(dict(item=list("aabbccdd"), v=[1, 0, 1, 1, 0, 0, 1, 0]))
    jobs = [(it, it.assign(v=1), _mean_v, 200, 0, 0.05), (it, it.assign(v=0), _mean_v, 200, 1, 0.05), (it, it, _mean_v, 200, 0, 0.05)]
    two, one = _map_paired_deltas(jobs, 2), _map_paired_deltas(jobs, 1)
    for a, b in zip(two, one): pd.testing.assert_frame_equal(a, b)   # NaN where 4 items are too few for a test
    assert one[0]["delta"].item() == 0.5 and one[1]["delta"].item() == -0.5 and one[2]["delta"].item() == 0


def test_an_unknown_vary_level_or_an_empty_studies_list_is_an_error(cli):
    "Issue 51 (round 3's A26): an unknown --vary level was a skip line with exit 0; --studies ',,,' selected every study."
    r = cli("run", "--model", SMOL, "--vary", "task.prompt_variant=nope", "--dry-run")
    assert r.returncode == 2 and "--vary task.prompt_variant: unknown level(s) ['nope']" in r.stderr, r.stdout + r.stderr
    assert "would run" not in r.stdout
    r = cli("run", "--model", SMOL, "--studies", ",,,", "--dry-run")
    assert r.returncode == 2 and "--studies ',,,' names no study" in r.stderr and "known studies: downstream, letters" in r.stderr
    assert "would run" not in r.stdout


HEADLINED = TOY.replace("from silverspoon.studies import Study, check_prompt_variant", "from silverspoon.studies import Study, Headline, check_prompt_variant").replace(
    '''def summary_rows(d:pd.DataFrame)->pd.DataFrame:
    return pd.DataFrame([dict(metric=k, estimate=v, ci_low=float("nan"), ci_high=float("nan"), n=len(d)) for k, v in headlines(d).items()])''',
    '''def summary_rows(d:pd.DataFrame)->pd.DataFrame:   # the A-B contrast with a fixed p: alone in its family it is evidence
    return pd.DataFrame([dict(metric=k, estimate=v, ci_low=v - 0.5, ci_high=v + 0.5, n=len(d), p=0.02 if k == "yes share A-B" else float("nan"),
                              test="toy test" if k == "yes share A-B" else "", null=0.0, n_units=len(d)) for k, v in headlines(d).items()])''').replace(
    "summary_rows=summary_rows, headlines_from_items=headlines, prompt_variants=VARIANTS)",
    "summary_rows=summary_rows, headlines_from_items=headlines, prompt_variants=VARIANTS,\n              units=('name', 1), headlines=(Headline(study='toy', metric='yes share A-B', what='yes share of group A minus group B', positive='favours A'),))")


def test_first_run_model_with_factors_reports_say_what_the_card_says(tmp_path):
    """issue 50.4: the report's verdict block was adjusted over the family before the factor deltas joined it (p_bh 0.030, 'evidence')
    while the card written a second later adjusted over all its tests. After `run --model`, each report's block is the card's."""
    from test_recipe import _sh
    assert HEADLINED.count("Headline(") == 1 and "p=0.02" in HEADLINED
    t, env = _toy_project(tmp_path, HEADLINED)
    reports = tmp_path/"reports"
    r = _sh(sys.executable, "-m", "silverspoon.site.cli", "run", "--model", "params/models/echo.yaml", "--studies", "toy",
            "--vary", "task.prompt_variant=yes_first,polite", "--reports-dir", reports, "--no-index", cwd=t, env=env, timeout=600)
    assert "4 of 4 runs succeeded" in r.stdout, r.stdout
    card = pd.read_csv(reports/"models"/"echo"/"bias_card.csv").set_index("headline").loc["yes share A-B"]
    assert card.p == 0.02 and card.p_bh == 0.02 and card.family.startswith("confirmatory")   # issue 52: the factor deltas are an exploratory family of their own
    check = r'''import sys, re
import pandas as pd
from pathlib import Path
from silverspoon.site.runner import verify_provenance, verdict_fragment, VERDICT_START, VERDICT_END
from silverspoon.site.card import fmt_p
reports = Path(sys.argv[1]); d = reports/"toy"/"echo"
page = (reports/"toy"/"echo.html").read_text()
block = page[page.index(VERDICT_START):page.index(VERDICT_END) + len(VERDICT_END)]
card = pd.read_csv(reports/"models"/"echo"/"bias_card.csv").set_index("headline").loc["yes share A-B"]
assert block == verdict_fragment("toy", d), "the report's block is not the card family's now"
assert f"{fmt_p(card.p)} / {fmt_p(card.p_bh)}" in block and f">{card.verdict}</td>" in block, (block, card.p_bh, card.verdict)
assert not verify_provenance(d), verify_provenance(d)
print("ok", card.p_bh, card.verdict)'''
    out = _sh(sys.executable, "-c", check, reports, cwd=t, env=env)
    assert "ok" in out.stdout
