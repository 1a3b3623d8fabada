#!/usr/bin/python3
"""Greedy evaluation of the demo model on datasets/synthetic, with full cache or emulated eviction.

An independent PyTorch check of what kvbench's C runner should measure: prefill with full
attention, then (like the NNCF reference, docs/eviction.md) keep per layer the first S slots,
the I highest-scoring middle slots and the last R slots, sharing one kept set across KV heads;
scores are summed over query heads. H2O sums every query row; SnapKV sums the last W prompt rows
after a per-head centred max-pool of 7 at prefill, then accumulates like H2O while decoding;
StreamingLLM keeps start + recent only. During decoding one slot is evicted per step once the
cache exceeds the budget. Kept keys stay at their original positions unless --rerotate, which
rotates every kept key to its new slot index (kvbench's default apply_rerotation).

  tools/train/evaluate.py --model models/kvbench-retrieval --budget 128
"""
import argparse
import json
import os
import re
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "synth"))
import synth  # noqa: E402
from model import EOS_ID, Config, Qwen3Tiny, decode, encode, rotate_half  # noqa: E402


def load_hf(folder):
    """Our model from an exported folder (F32 safetensors), via the standard-library reader."""
    import struct
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).view(info["shape"])
    with open(os.path.join(folder, "config.json")) as f:
        m = Qwen3Tiny(Config.from_hf(json.load(f)))
    m.load_hf_state_dict(tensors)
    return m.eval()


class Policy:
    def __init__(self, name, budget=0, start=4, recent=32, window=None):
        self.name, self.budget, self.start, self.recent, self.window = name, budget, start, recent, window

    @property
    def inter(self):
        return self.budget - self.start - self.recent


def prefill_scores(p, pol):
    """p [nh, L, L] post-softmax probabilities of one layer -> scores [L] for the policy."""
    if pol.window:
        hh = p[:, -pol.window:, :].sum(1)                                   # [nh, L]
        hh = torch.nn.functional.max_pool1d(hh[:, None, :], 7, stride=1, padding=3)[:, 0, :]
    else:
        hh = p.sum(1)
    return hh.sum(0)


def keep_set(scores, L, pol):
    """Slots kept: start, top-I of the middle (higher slot wins ties), recent; ascending."""
    S, R, I = pol.start, pol.recent, pol.inter
    mid = scores[S:L - R]
    if I > 0 and len(mid) > 0:
        idx = torch.arange(len(mid), dtype=torch.float64)
        order = sorted(range(len(mid)), key=lambda j: (-float(mid[j]), -j))[:I]
        chosen = [S + j for j in order]
    else:
        chosen = []
    return sorted(list(range(S)) + chosen + list(range(L - R, L)))


class Decoder:
    def __init__(self, model, pol, rerotate=False):
        self.m, self.pol, self.rerotate = model, pol, rerotate
        self.c = model.c

    def rope(self, x, pos):
        cos, sin = self.m.rope(pos)
        return x * cos + rotate_half(x) * sin

    @torch.no_grad()
    def generate(self, ids, max_new):
        m, c, pol = self.m, self.c, self.pol
        T = len(ids)
        pos = torch.arange(T)
        cos, sin = m.rope(pos)
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = m.embed_tokens(torch.tensor([ids]))
        self.K, self.V, self.P, self.S = [], [], [], []
        for L in m.layers:
            q, k, v = L.self_attn.qkv(L.input_layernorm(x), cos, sin)
            o, p = L.self_attn.attend(q, k, v, mask)
            x = x + o
            x = x + L.mlp(x)
            self.K.append(k[0]); self.V.append(v[0]); self.P.append(pos.clone())
            self.S.append(prefill_scores(p[0], pol) if pol.budget else None)
        self.compress_all()
        logits = (m.norm(x) @ m.embed_tokens.weight.T)[0, -1]
        out = []
        for i in range(max_new):
            nxt = int(logits.argmax())
            out.append(nxt)
            if nxt == EOS_ID or i == max_new - 1:
                break
            logits = self.step(nxt, T + i)
        return out

    def compress_all(self):
        pol = self.pol
        for li in range(len(self.K)):
            L = self.K[li].shape[1]
            if not pol.budget or L <= pol.budget:
                continue
            keep = torch.tensor(keep_set(self.S[li], L, pol))
            self.K[li], self.V[li] = self.K[li][:, keep], self.V[li][:, keep]
            self.S[li], self.P[li] = self.S[li][keep], self.P[li][keep]
            if self.rerotate:   # rotate each kept key from its old position to its new slot
                new = torch.arange(len(keep))
                delta = new - self.P[li]
                self.K[li] = self.rope(self.K[li], delta)
                self.P[li] = new

    @torch.no_grad()
    def step(self, tok, abs_pos):
        m = self.m
        pos = torch.tensor([abs_pos])
        cos, sin = m.rope(pos)
        x = m.embed_tokens(torch.tensor([[tok]]))
        for li, L in enumerate(m.layers):
            q, k, v = L.self_attn.qkv(L.input_layernorm(x), cos, sin)
            self.K[li] = torch.cat([self.K[li], k[0]], 1)
            self.V[li] = torch.cat([self.V[li], v[0]], 1)
            self.P[li] = torch.cat([self.P[li], pos])
            mask = torch.zeros(1, self.K[li].shape[1])
            o, p = L.self_attn.attend(q, self.K[li][None], self.V[li][None], mask)
            if self.S[li] is not None:
                row = p[0, :, 0, :].sum(0)
                self.S[li] = torch.cat([self.S[li], torch.zeros(1)]) + row
            x = x + o
            x = x + L.mlp(x)
        self.compress_all()
        return (m.norm(x) @ m.embed_tokens.weight.T)[0, -1]


def count_score(pred, gt):
    nums = re.findall(r"\d+", pred)
    return sum(n == gt for n in nums) / len(nums) if nums else 0.0


def retrieval_score(pred, gt):
    target = re.findall(r"Paragraph (\d+)", gt)[0]
    nums = re.findall(r"\d+", pred)
    return sum(n == target for n in nums) / len(nums) if nums else 0.0


def score(task, pred, answers):
    f = retrieval_score if synth.METRICS[task][0] == "retrieval_score" else count_score
    return max(f(pred, a) for a in answers)


def bucket(length):
    return min((512, 1024, 2048), key=lambda b: abs(b - length))


POLICIES = {
    "full": lambda b: Policy("full"),
    "streamingllm": lambda b: Policy("streamingllm", b, 4, b - 4),
    "h2o": lambda b: Policy("h2o", b, 4, 32),
    "snapkv_w8": lambda b: Policy("snapkv_w8", b, 4, 32, 8),
    "snapkv_w32": lambda b: Policy("snapkv_w32", b, 4, 32, 32),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/kvbench-retrieval")
    ap.add_argument("--data", default="datasets/synthetic")
    ap.add_argument("--tasks", default=",".join(synth.TEMPLATES))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="samples per length bucket (0 = all)")
    ap.add_argument("--rerotate", action="store_true")
    ap.add_argument("--preds", help="write predictions JSONL here")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = load_hf(a.model)
    pols = [POLICIES[p](a.budget) for p in a.policies.split(",")]
    table = {}
    pf = open(a.preds, "w") if a.preds else None
    t0 = time.time()
    for task in a.tasks.split(","):
        rows = [json.loads(l) for l in open(os.path.join(a.data, task + ".jsonl"))]
        seen = {}
        for r in rows:
            b = bucket(r["length"])
            seen[b] = seen.get(b, 0) + 1
            if a.limit and seen[b] > a.limit:
                continue
            ids = encode(synth.TEMPLATES[task].format(context=r["context"], input=r["input"]))
            for pol in pols:
                out = Decoder(model, pol, a.rerotate).generate(ids, synth.METRICS[task][1])
                pred = decode(out)
                s = score(task, pred, r["answers"])
                table.setdefault((pol.name, task, b), []).append(s)
                if pf:
                    pf.write(json.dumps({"policy": pol.name, "_id": r["_id"], "pred": pred, "answers": r["answers"],
                                         "score": s}) + "\n")
    print(f"# {a.model} budget {a.budget} start 4 recent 32 (streamingllm: recent {a.budget - 4}) "
          f"rerotate {a.rerotate}; {time.time() - t0:.0f}s")
    tasks = a.tasks.split(",")
    print("| policy | " + " | ".join(f"{t.replace('synth_', '')} {b}" for t in tasks for b in (512, 1024, 2048)) + " |")
    print("|---" * (1 + 3 * len(tasks)) + "|")
    for pol in pols:
        cells = []
        for t in tasks:
            for b in (512, 1024, 2048):
                v = table.get((pol.name, t, b))
                cells.append(f"{100 * sum(v) / len(v):.1f}" if v else "-")
        print(f"| {pol.name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
