#!/usr/bin/env python3
"""Writes tests/data/report/example/{run.json,scores.json}: a HAND-MADE run of
configs/nightly.json for the report screenshot and tests. The scores are
invented (the full-cache row is the PyramidKV paper's Llama-3-8B FullKV row,
as published in the paper; compressed rows lose a made-up amount that shrinks with the
budget). Nothing here is a measurement.

Each row also gets 200 invented per-sample scores (what kvbench's intervals
resample): 0/1 answers, so a task score is a multiple of 0.5. Samples are
ranked by difficulty, which grows with an invented length (1.5k-12k words,
so all three LongBench-E buckets are used); a config answers the easiest k
of them, k from its score, with 5 % of its answers moved at random, so that
configs pair with the full cache the way real runs do.

usage: make_example.py KVBENCH_BINARY"""
import json, math, os, random, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "..", "..", ".."))
plan = subprocess.run([sys.argv[1], "run", os.path.join(root, "configs/nightly.json"), "--dry-run"],
                      capture_output=True, text=True).stdout  # the plan comes before the data checks
configs = []
for line in plan.splitlines():
    parts = line.split()
    if len(parts) >= 3 and len(parts[1]) == 16 and all(c in "0123456789abcdef" for c in parts[1]):
        if parts[2] == "full":
            configs.append({"name": parts[0], "hash": parts[1], "budget": -1, "params": None})
        else:
            params = json.loads(line[line.index("{"):])
            configs.append({"name": parts[0], "hash": parts[1], "budget": int(parts[3]), "params": params})
tasks = ["narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "gov_report",
         "qmsum", "multi_news", "trec", "triviaqa", "samsum", "passage_count", "passage_retrieval_en",
         "lcc", "repobench-p"]
full = [25.70, 29.75, 41.12, 45.55, 35.87, 22.35, 25.63, 23.03, 26.21, 73.00, 90.56, 41.88, 4.67,
        69.25, 58.05, 50.77]
metric = {"gov_report": "rouge_score", "qmsum": "rouge_score", "multi_news": "rouge_score",
          "samsum": "rouge_score", "trec": "classification_score", "passage_count": "count_score",
          "passage_retrieval_en": "retrieval_score", "lcc": "code_sim_score",
          "repobench-p": "code_sim_score"}
penalty = {"h2o": 1.0, "snapkv": 0.8, "streaming": 1.6}
N = 200
rnd = random.Random(20261201)
lengths, order = {}, {}
for t in tasks:
    lengths[t] = [rnd.randint(1500, 12000) for _ in range(N)]
    # difficulty rank: longer is harder, with jitter
    order[t] = sorted(range(N), key=lambda i: lengths[t][i] + rnd.gauss(0, 2500))


def sample_scores(t, score):
    k = round(score * N / 100)
    right = set(order[t][:k])
    moved = round(0.05 * min(k, N - k))
    lose = rnd.sample(sorted(right), moved)
    gain = rnd.sample(sorted(set(range(N)) - right), moved)
    right = (right - set(lose)) | set(gain)
    return [1 if i in right else 0 for i in range(N)]


rows = []
for c in configs:
    p = c["params"] or {}
    alg = p.get("algorithm", "full")
    for i, t in enumerate(tasks):
        if alg == "full":
            s = full[i]
        else:
            loss = penalty[alg] * 24 / math.sqrt(c["budget"] / 16) * (0.6 + 0.8 * ((i * 7) % 5) / 4)
            if p.get("score_aggregation") == "norm_sum":
                loss *= 0.9
            if p.get("refined_size"):
                loss *= 0.85
            s = max(0.0, full[i] - loss)
        per = sample_scores(t, s)
        rows.append({"config": c["name"], "task": t, "metric": metric.get(t, "qa_f1_score"),
                     "score": 100 * sum(per) / N, "n": N, "mean_prompt_tokens": 6000 + 97 * i,
                     "mean_kept_tokens": c["budget"] if c["budget"] > 0 else 6000 + 97 * i,
                     "mean_prefill_s": 4.2, "mean_decode_s": 0.9,
                     "sample_ids": [f"s{j}" for j in range(N)], "sample_scores": per,
                     "sample_lengths": lengths[t]})
run = {"kvbench_version": "0.1.0 (hand-made example)", "model": "Qwen/Qwen3-0.6B",
       "model_hash": "0000000000000000", "protocol": "longbench", "created": "2026-11-29T00:00:00Z",
       "shard": None, "matrix": {"name": "example", "model": "Qwen/Qwen3-0.6B", "protocol": "longbench",
                                 "configs": configs, "tasks": [{"task": t} for t in tasks]}}
out = os.path.join(here, "example")
os.makedirs(out, exist_ok=True)
json.dump(run, open(os.path.join(out, "run.json"), "w"), indent=1)
# one row per line: the per-sample lists would take a line per number
with open(os.path.join(out, "scores.json"), "w") as f:
    f.write('{"rows": [\n' + ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n]}\n")
print(f"{len(configs)} configs, {len(rows)} rows -> {out}")
