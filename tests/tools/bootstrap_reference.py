#!/usr/bin/env python3
"""Independent percentile-bootstrap intervals for a run folder's scores.json,
to check kvbench's own (harness/report/bootstrap.c, harness/report/rowstats.c) against.

Deliberately different from kvbench's resampler: numpy's PCG64 generator
instead of SplitMix64, and multinomial resampling WEIGHTS (how often each
sample is drawn) instead of drawn indices, 10,000 resamples instead of 2,000,
and its own pairing by sample id. What is the same is the definition: the
95 % interval is the 2.5th and 97.5th percentiles of the resampled means
(numpy.percentile, linear), paired differences resample the samples both rows
scored, and an average over tasks resamples each task on its own and weighs
every task the same (LongBench's plain means).

    usage: bootstrap_reference.py RUN_DIR OUT.json

Writes, per (config, task) row: ci_low, ci_high and, for configs other than
"full", delta_full with delta_ci_low, delta_ci_high; per config: the same for
the mean over all its tasks ("averages"). Numbers in percent.
"""
import json
import sys

import numpy as np

RESAMPLES = 10_000
SEED = 20261201


def resampled_means(rng, x):
    """RESAMPLES means of x, each under multinomial(n, 1/n) draw counts."""
    n = len(x)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=RESAMPLES)
    return 100.0 * counts @ np.asarray(x, dtype=float) / n


def interval(v):
    lo, hi = np.percentile(v, [2.5, 97.5])
    return float(lo), float(hi)


def main(run_dir, out_path):
    rows = json.load(open(f"{run_dir}/scores.json"))["rows"]
    rng = np.random.default_rng(SEED)
    samples = {}  # (config, task) -> {id: score}
    for r in rows:
        samples[(r["config"], r["task"])] = dict(zip(r["sample_ids"], r["sample_scores"]))
    out_rows, boots, deltas = [], {}, {}
    for r in rows:
        key = (r["config"], r["task"])
        own = samples[key]
        boot = resampled_means(rng, list(own.values()))
        boots[key] = boot
        entry = {"config": r["config"], "task": r["task"]}
        entry["ci_low"], entry["ci_high"] = interval(boot)
        full = samples.get(("full", r["task"]))
        if r["config"] != "full" and full is not None:
            shared = [i for i in own if i in full]
            diffs = [own[i] - full[i] for i in shared]
            d = resampled_means(rng, diffs)
            deltas[key] = d
            entry["delta_full"] = 100.0 * float(np.mean(diffs))
            entry["delta_ci_low"], entry["delta_ci_high"] = interval(d)
            entry["n_paired"] = len(shared)
        out_rows.append(entry)
    averages = []
    for config in dict.fromkeys(r["config"] for r in rows):
        tasks = [t for (c, t) in boots if c == config]
        entry = {"config": config, "tasks": tasks}
        entry["ci_low"], entry["ci_high"] = interval(np.mean([boots[(config, t)] for t in tasks], axis=0))
        if config != "full":
            entry["delta_ci_low"], entry["delta_ci_high"] = interval(
                np.mean([deltas[(config, t)] for t in tasks], axis=0))
        averages.append(entry)
    json.dump({"made_by": "tests/tools/bootstrap_reference.py", "resamples": RESAMPLES,
               "seed": SEED, "generator": "numpy PCG64, multinomial weights",
               "rows": out_rows, "averages": averages},
              open(out_path, "w"), indent=1)
    print(f"{len(out_rows)} rows, {len(averages)} averages -> {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
