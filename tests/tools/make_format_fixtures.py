#!/usr/bin/env python3
"""Writes tests/data/formats/: the same LongBench predictions as LongBench's
pred.py writes them (pred/<model>/<task>.jsonl), as kvpress's evaluation
writes them (<run>/predictions.csv: a pandas DataFrame without "context",
to_csv(index=False), list cells as numpy prints an object array) and as
lm-evaluation-harness --log_samples writes them (<model>/samples_<task>_
<date>.jsonl). The layouts follow kvpress 0.4.1 evaluation/evaluate.py and
lm-eval's logged samples (doc, target, resps, filtered_resps, hashes); the
records are made up. Run from tests/data/formats."""
import csv
import io
import json
import os

RECORDS = {
    "qasper": [
        dict(_id="q0", pred="the cat", answers=["cat"], all_classes=None, length=5000),
        dict(_id="q1", pred="dog's bone\nsecond line", answers=["a dog's bone", "bone"],
             all_classes=None, length=1),
        dict(_id="q2", pred="no", answers=["cat"], all_classes=None, length=9000),
    ],
    "trec": [
        dict(_id="t0", pred="Food\nmore text", answers=["Food"], all_classes=["City", "Food"],
             length=10),
        dict(_id="t1", pred="City, Food", answers=["City"], all_classes=["City", "Food"],
             length=9000),
    ],
}


def np_repr(xs):
    """str(np.array(xs, dtype=object)) for short lists of strings."""
    return "" if xs is None else "[" + " ".join(repr(x) for x in xs) + "]"


def main():
    # pred.py: two models, model-b with one answer right that model-a got wrong
    for model, better in (("model-a", False), ("model-b", True)):
        os.makedirs(f"pred/{model}", exist_ok=True)
        for task, records in RECORDS.items():
            with open(f"pred/{model}/{task}.jsonl", "w") as f:
                for r in records:
                    pred = "cat" if better and r["_id"] == "q2" else r["pred"]
                    f.write(json.dumps({"pred": pred, "answers": r["answers"],
                                        "all_classes": r["all_classes"],
                                        "length": r["length"]}, ensure_ascii=False) + "\n")
    columns = ["question", "answer_prefix", "task", "all_classes", "length", "max_new_tokens",
               "answers", "predicted_answer", "compression_ratio"]
    for task, records in RECORDS.items():
        run = f"kvpress/longbench__{task}__org--model__knorm__0.50"
        os.makedirs(run, exist_ok=True)
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for r in records:
            w.writerow(["Which one?", "Answer:", task, np_repr(r["all_classes"]), r["length"], 64,
                        np_repr(r["answers"]), r["pred"], 0.5])
        with open(f"{run}/predictions.csv", "w") as f:
            f.write(out.getvalue())
    os.makedirs("lm-eval/org__model", exist_ok=True)
    for task, records in RECORDS.items():
        name = f"lm-eval/org__model/samples_longbench_{task}_2026-01-01T00-00-00.000000.jsonl"
        with open(name, "w") as f:
            for i, r in enumerate(records):
                doc = {"input": "Which one?", "context": "...", "answers": r["answers"],
                       "length": r["length"], "dataset": task, "language": "en",
                       "all_classes": r["all_classes"], "_id": r["_id"]}
                f.write(json.dumps({
                    "doc_id": i, "doc": doc, "target": r["answers"],
                    "arguments": {"gen_args_0": {"arg_0": "Which one?",
                                                 "arg_1": {"until": ["\n\n"]}}},
                    "resps": [[r["pred"]]], "filtered_resps": [r["pred"]], "filter": "none",
                    "metrics": ["score"], "doc_hash": "0" * 64, "prompt_hash": "1" * 64,
                    "target_hash": "2" * 64, "score": 0.0}) + "\n")


if __name__ == "__main__":
    main()
