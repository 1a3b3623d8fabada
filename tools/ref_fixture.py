"""The part every numpy eviction reference shares (tools/ref_policies.py,
tools/ref_budgets.py): greedy decoding of 32 tokens, EOS ignored, and the
fixture files tests/data/eviction expects: OUT.trace.jsonl, OUT.tokens.json
and OUT.logits.npy (float32 [32, vocab], the logits that chose each token).
forward(tokens, start_pos, step, trace) returns the logits of every fed row."""
import json

import numpy as np


def write_greedy_fixture(forward, ids, out, n_new=32):
    trace, new, chose = [], [], []
    logits = forward(ids, 0, 0, trace)[-1]
    n_pos = len(ids)
    for step in range(1, n_new + 1):
        nxt = int(np.argmax(logits))
        new.append(nxt)
        chose.append(logits.astype(np.float32))
        if step == n_new:
            break
        logits = forward([nxt], n_pos, step, trace)[-1]
        n_pos += 1
    with open(out + ".trace.jsonl", "w") as f:
        for e in trace:
            f.write(json.dumps(e) + "\n")
    with open(out + ".tokens.json", "w") as f:
        json.dump({"tokens": new}, f)
    np.save(out + ".logits.npy", np.stack(chose))
