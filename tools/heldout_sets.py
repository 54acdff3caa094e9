"""Held-out parser sets (issue 50 item 6): real replies of small models of other families than SmolLM2, hand-labelled blind.

    python tools/heldout_sets.py params  MODEL_DIR GGUF_FILE TEMPLATE RUN OUT   # run files for each study (small samples)
    SILVERSPOON_STORE=OUT/store silverspoon run --no-index --reports-dir OUT/reports OUT/params/<study>/RUN.yaml
    python tools/heldout_sets.py export  STORE RUN OUT        # blind sheets: prompt and reply only, no parser output
    python tools/heldout_sets.py measure [SET ...]            # after labelling: parser + reply gate on tests/parser_sets/*_heldout.csv

The blind sheets carry no parser output; labels are written into a copy of them (column `expected`, and `non_answer`
for a reply that answers nothing: the kind of non-answer), then saved as tests/parser_sets/<set>_heldout.csv. `measure`
is run only after that, and prints the agreement per set (status, and value) and the table of disagreement classes.
"""
import json, sys
from pathlib import Path
import pandas as pd

STUDIES = {   # study -> (sample.n, max_new_tokens, extra task fields): small samples, a few CPU minutes each
    "normative": (45, 48, {}), "stop": (3, 12, {}), "professions": (60, 16, {}),
    "narratives": (16, 96, {"sentiment_model": None}), "letters": (8, 128, {"formality_model": None, "sentiment_model": None, "nli_model": None})}
SETS = {"normative_heldout": "normative", "professions_heldout": "professions", "stop_faithful_heldout": "stop", "stop_strict_heldout": "stop",
        "narratives_heldout": "narratives", "letters_heldout": "letters"}


def write_params(model_dir, gguf_file, template, run, out):
    "One run file per study in OUT/params/<study>/ (a copy of the study's _base-local.yaml beside it), loading the GGUF on CPU."
    root, out = Path(__file__).resolve().parents[1], Path(out)
    for study, (n, tokens, task) in STUDIES.items():
        d = out/"params"/study; d.mkdir(parents=True, exist_ok=True)
        (d/"_base-local.yaml").write_text((root/"params"/study/"_base-local.yaml").read_text())
        spec = {"study": study, "include": "_base-local.yaml", "run": run, "description": f"{run}: held-out parser-set sample",
                "model": {"id": str(model_dir), "gguf_file": gguf_file, "chat_template": str(template)},
                "generation": {"max_new_tokens": tokens}, "sample": {"n": n}, **({"task": task} if task else {})}
        (d/f"{run}.yaml").write_text(json.dumps(spec, indent=1))
        print(d/f"{run}.yaml")


def export(store, run, out):
    "Blind sheets, one per study: item, the user turn(s) the reply answers and the reply. No parser or gate output."
    out = Path(out); out.mkdir(parents=True, exist_ok=True)
    for f in sorted(Path(store).glob(f"*/{run}.jsonl")):
        recs = [json.loads(l) for l in f.read_text(encoding="utf-8").splitlines() if l.strip()]
        rows = [dict(item_id=r["item_id"], user_turns=json.dumps([m["content"] for m in r["messages"] if m["role"] == "user"], ensure_ascii=False),
                     prompt=[m["content"] for m in r["messages"] if m["role"] == "user"][-1], reply=r["answer"], finish_reason=r["finish_reason"],
                     completion_tokens=r["completion_tokens"], seconds=r["seconds"]) for r in recs]
        pd.DataFrame(rows).to_csv(out/f"{f.parent.name}_blind.csv", index=False)
        print(out/f"{f.parent.name}_blind.csv", len(rows), "replies")


def measure(name):
    "Parser + the study's reply gate on a held-out set, as tests/test_parser_sets_heldout.py measures it (items with parser, status, check, predicted)."
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]/"tests"))
    from test_parser_sets_heldout import measured
    return measured(name)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:] or ["measure"]
    if cmd == "params": write_params(*args)
    elif cmd == "export": export(*args)
    elif cmd == "measure":
        pd.set_option("display.width", 250); pd.set_option("display.max_colwidth", 90)
        for name in args or list(SETS):
            m = measure(name); clear = m[~m.hard]; right = clear.predicted.eq(clear.expected)
            na = m.non_answer.fillna("").ne("")
            print(f"{name}: {int(right.sum())} of {len(clear)} clear replies right (status and value); {int(na.sum())} labelled non-answers, "
                  f"{int((na & m.status.eq('not_an_answer')).sum())} flagged by the gate, {int((na & m.status.eq('answer')).sum())} read as answers")
            print(m.groupby(["expected", "non_answer", "parser", "status", "check"], dropna=False).size().rename("n").to_string())
            wrong = clear[~right]
            if len(wrong): print(wrong[["item_id", "reply", "expected", "parser", "predicted"]].to_string())
    else: sys.exit(__doc__)
