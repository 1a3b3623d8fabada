#!/usr/bin/python3
"""Float64 reference of the budget schedules (docs/eviction.md): layer_budget "pyramid"
(PyramidKV) and head_budget "adaptive" (AdaKV), for the e2e fixtures.

    tools/ref_budgets.py REFERENCE_DIR MODEL_DIR PROMPT_IDS CONFIG_JSON OUT_PREFIX

numpy only (no torch): the Qwen3 forward is written out here, in float64, with the weights read by
tests/tools/reference/safetensors_np.py (REFERENCE_DIR). Written from the semantics, independent of
the C code:
- H2O or SnapKV scores (sum), per_token (summed over all query heads, one kept set per layer) or
  per_head (summed over the query heads of each KV head, a set per KV head);
- layer l's intermediate size I_l: intermediate_size, or with layer_budget "pyramid"
  K = I, lo = K / beta, hi = 2K - lo, step = (hi - lo) / (N - 1), I_l = round(hi - l * step)
  (Python's round: half to even);
- uniform: a set keeps its first start_size tokens, its I_l best-scored candidates (score desc,
  later token first on ties) and its last recent_size tokens, whenever it holds more than
  S + I_l + R, at the end of prefill and at every decode step;
- head_budget "adaptive" (per_head): every KV head is a ragged list of its own tokens. When the
  heads' candidates (a head's tokens past its first S, before its last R) number more than
  Hkv * I_l together, each head keeps its best int(I_l * alpha) candidates, and the rest of the
  Hkv * I_l go to the best of all other candidates by (score desc, position desc, head desc);
- rerotation: a kept key turns by (its new index in its head's list - its old index); new tokens
  get their absolute positions.
Greedy, 32 new tokens, EOS ignored. Writes OUT_PREFIX.trace.jsonl ({"step", "layer",
"kept_positions"}: a list, or a list per KV head), OUT_PREFIX.tokens.json and OUT_PREFIX.logits.npy
(float32 [32, vocab]: the logits that chose each token), as tests/data/eviction expects.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import safetensors_np  # noqa: E402
from ref_fixture import write_greedy_fixture  # noqa: E402

model_dir, ids_path, cfg_path, out = sys.argv[2:6]
ids = [int(x) for x in open(ids_path).read().split(",")]
p = json.load(open(cfg_path))
S, Rc, I = p["start_size"], p["recent_size"], p["intermediate_size"]
algo = p["algorithm"]
per_head = p.get("strategy", "per_token") == "per_head"
pyramid = p.get("layer_budget", "uniform") == "pyramid"
beta = float(p.get("pyramid_beta", 20))
adaptive = p.get("head_budget", "uniform") == "adaptive"
alpha = float(p.get("alpha_safeguard", 0.2))
rerotate = p.get("apply_rerotation", True)
W = p.get("window_size") or 8
assert algo in ("h2o", "snapkv") and p.get("score_aggregation", "sum") == "sum"
assert p.get("strategy", "per_token") in ("per_token", "per_head") and (per_head or not adaptive)

c = json.load(open(os.path.join(model_dir, "config.json")))
nh, nkv, n_layers = c["num_attention_heads"], c["num_key_value_heads"], c["num_hidden_layers"]
hd, eps, theta = c["head_dim"], c["rms_norm_eps"], float(c["rope_theta"])
group = nh // nkv
raw = safetensors_np.load_folder(model_dir)
Wt = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
embed = Wt["model.embed_tokens.weight"]
lm_head = Wt.get("lm_head.weight", embed)
inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)


def layer_intermediate(li):
    if not pyramid or n_layers == 1:
        return I
    K = float(I)
    lo = K / beta
    hi = 2.0 * K - lo
    step = (hi - lo) / (n_layers - 1)
    return int(round(hi - li * step))


def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rot(x, pos):
    """x [T, hd] rotated to positions pos [T] (HF rotate_half)."""
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate((ang, ang), -1)), np.sin(np.concatenate((ang, ang), -1))
    half = np.concatenate((-x[:, hd // 2:], x[:, :hd // 2]), -1)
    return x * cos + half * sin


def maxpool7(x):
    """centred max-pool, kernel 7, -inf padding."""
    y = np.concatenate((np.full(3, -np.inf), x, np.full(3, -np.inf)))
    return np.max(np.stack([y[i:i + len(x)] for i in range(7)]), axis=0)


# per layer, per KV head: ragged lists of keys [n, hd], values, positions, scores
K = [[np.zeros((0, hd)) for _ in range(nkv)] for _ in range(n_layers)]
V = [[np.zeros((0, hd)) for _ in range(nkv)] for _ in range(n_layers)]
P = [[[] for _ in range(nkv)] for _ in range(n_layers)]
SC = [[np.zeros(0) for _ in range(nkv)] for _ in range(n_layers)]


def top(cands, score, k):
    """the k best of cands (indices) by (score desc, index desc)."""
    return sorted(cands, key=lambda t: (score[t], t), reverse=True)[:k]


def keep_uniform(li, Il):
    """per set: start, the I_l best candidates, recent -- or None within the budget."""
    n = len(P[li][0])
    if n <= S + Il + Rc:
        return None
    if per_head:
        sets = [SC[li][h] for h in range(nkv)]
    else:
        sets = [sum(SC[li][h] for h in range(nkv))] * 1
    keeps = []
    for s in sets:
        keeps.append(sorted(list(range(S)) + top(range(S, n - Rc), s, Il) + list(range(n - Rc, n))))
    return keeps if per_head else keeps * nkv


def keep_adaptive(li, Il):
    n = [len(P[li][h]) for h in range(nkv)]
    cand = [list(range(S, n[h] - Rc)) if n[h] > S + Rc else [] for h in range(nkv)]
    if sum(len(x) for x in cand) <= nkv * Il:
        return None
    n_safe = int(Il * alpha)
    taken = [set(top(cand[h], SC[li][h], min(n_safe, len(cand[h])))) for h in range(nkv)]
    rest = [(SC[li][h][t], P[li][h][t], h, t) for h in range(nkv) for t in cand[h] if t not in taken[h]]
    rest.sort(reverse=True)   # score desc, position desc, head desc
    for _, _, h, t in rest[:nkv * Il - sum(len(x) for x in taken)]:
        taken[h].add(t)
    return [sorted(set(range(min(S, n[h]))) | taken[h] | set(range(max(n[h] - Rc, 0), n[h])))
            for h in range(nkv)]


def evict(li, step, trace):
    Il = layer_intermediate(li)
    keeps = keep_adaptive(li, Il) if adaptive else keep_uniform(li, Il)
    if keeps is None:
        return
    for h, keep in enumerate(keeps):
        idx = np.array(keep, dtype=np.int64)
        delta = np.arange(len(keep)) - idx           # new index - old index in the head's list
        k = K[li][h][idx]
        K[li][h] = rot(k, delta) if rerotate else k
        V[li][h] = V[li][h][idx]
        P[li][h] = [P[li][h][t] for t in keep]
        SC[li][h] = SC[li][h][idx]
    kept = [list(P[li][h]) for h in range(nkv)] if per_head else list(P[li][0])
    trace.append({"step": step, "layer": li, "kept_positions": kept})


def forward(tokens, start_pos, step, trace):
    T = len(tokens)
    pos = list(range(start_pos, start_pos + T))
    x = embed[np.array(tokens)]
    for li in range(n_layers):
        pre = f"model.layers.{li}."
        w = lambda n: Wt[pre + n]  # noqa: E731
        h = rms(x, w("input_layernorm.weight"))
        q = (h @ w("self_attn.q_proj.weight").T).reshape(T, nh, hd)
        k = (h @ w("self_attn.k_proj.weight").T).reshape(T, nkv, hd)
        v = (h @ w("self_attn.v_proj.weight").T).reshape(T, nkv, hd)
        q = rms(q, w("self_attn.q_norm.weight"))
        k = rms(k, w("self_attn.k_norm.weight"))
        q = np.stack([rot(q[:, i], pos) for i in range(nh)], 1)
        k = np.stack([rot(k[:, i], pos) for i in range(nkv)], 1)
        for g in range(nkv):
            K[li][g] = np.concatenate((K[li][g], k[:, g]))
            V[li][g] = np.concatenate((V[li][g], v[:, g]))
            P[li][g] = P[li][g] + pos
        att = np.zeros((T, nh, hd))
        contrib = [None] * nkv
        first = len(SC[li][0]) == 0
        for hq in range(nh):
            g = hq // group
            n = len(P[li][g])
            old = n - T
            # cached tokens precede the new ones: row i sees entries < old + i + 1
            logits = q[:, hq] @ K[li][g].T * hd ** -0.5
            logits[np.arange(n)[None, :] > (old + np.arange(T))[:, None]] = -np.inf
            a = np.exp(logits - logits.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            att[:, hq] = a @ V[li][g]
            s = maxpool7(a[-W:].sum(0)) if algo == "snapkv" and first else a.sum(0)
            contrib[g] = s if contrib[g] is None else contrib[g] + s
        for g in range(nkv):
            cg = contrib[g].copy()
            cg[:S] = 0
            old = len(SC[li][g])
            SC[li][g] = np.concatenate((SC[li][g] + cg[:old], cg[old:]))
        x = x + att.reshape(T, nh * hd) @ w("self_attn.o_proj.weight").T
        hh = rms(x, w("post_attention_layernorm.weight"))
        gate = hh @ w("mlp.gate_proj.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * (hh @ w("mlp.up_proj.weight").T)) @ w("mlp.down_proj.weight").T
        evict(li, step, trace)
    return rms(x, Wt["model.norm.weight"]) @ lm_head.T


write_greedy_fixture(forward, ids, out)
