#!/usr/bin/python3
"""Check an exported folder against the reference implementation in tests/tools/reference:
the tokenizer.json encodes every evaluation prompt like the training code, and qwen3_ref.py's
logits and greedy answers agree with this package's model on a few prompts of each task.

  tools/train/check_export.py --model models/kvbench-retrieval [--ref tests/tools/reference]
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "synth"))
import synth  # noqa: E402
from evaluate import Decoder, Policy, load_hf  # noqa: E402
from model import encode  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/kvbench-retrieval")
    ap.add_argument("--data", default="datasets/synthetic")
    ap.add_argument("--ref", default=os.path.join(HERE, "..", "..", "tests", "tools", "reference"))
    ap.add_argument("--per-task", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, a.ref)
    import qwen3_ref
    import qwen_tokenizer_ref
    tok = qwen_tokenizer_ref.Tokenizer(os.path.join(a.model, "tokenizer.json"))
    ref = qwen3_ref.Model(a.model)
    ours = load_hf(a.model)
    n_tok_bad, worst, n_gen, n_gen_same = 0, 0.0, 0, 0
    for task in synth.TEMPLATES:
        rows = [json.loads(line) for line in open(os.path.join(a.data, task + ".jsonl"))]
        for r in rows:
            prompt = synth.TEMPLATES[task].format(context=r["context"], input=r["input"])
            n_tok_bad += tok.encode(prompt) != encode(prompt)
        step = max(1, len(rows) // a.per_task) + 1   # +1: the files interleave lengths
        for r in rows[::step][:a.per_task]:
            ids = encode(synth.TEMPLATES[task].format(context=r["context"], input=r["input"]))
            ref.reset()
            lr = ref.forward(ids)
            with torch.no_grad():
                lo = ours(torch.tensor([ids]))[0]
            worst = max(worst, float((lr - lo).abs().max()))
            g_ref, _ = ref.generate(ids, synth.METRICS[task][1])
            g_ours = Decoder(ours, Policy("full")).generate(ids, synth.METRICS[task][1])
            n_gen += 1
            n_gen_same += g_ref == g_ours
            print(f"{r['_id']} len {len(ids)} ref {tok.decode(g_ref)!r} ours {tok.decode(g_ours)!r} "
                  f"gold {r['answers']}")
    print(f"tokenizer: {n_tok_bad} prompts encode differently; max |dlogit| {worst:.2e}; "
          f"greedy answers equal {n_gen_same}/{n_gen}")
    ok = n_tok_bad == 0 and worst < 1e-3 and n_gen_same == n_gen
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
