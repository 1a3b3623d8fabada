#!/usr/bin/python3
"""Float64 reference of strategy per_head (docs/eviction.md, per-head strategy) for the e2e fixtures.

    tools/ref_per_head.py REFERENCE_DIR MODEL_DIR PROMPT_IDS CONFIG_JSON OUT_PREFIX

H2O or SnapKV scores, summed per KV head over the query heads that share it (GQA); every KV head
keeps its own tokens: the first start_size slots, its intermediate_size best-scored candidates
(score desc, slot desc on ties) and the last recent_size slots, at the end of prefill and at every
decode step while a layer holds more than M slots. Kept keys are rotated by (new slot - old slot);
new tokens keep their absolute positions. Greedy, 32 new tokens, EOS ignored. Writes
OUT_PREFIX.trace.jsonl ({"step", "layer", "kept_positions": [per KV head]}),
OUT_PREFIX.tokens.json and OUT_PREFIX.logits.npy (float32 [32, vocab]: the logits that chose each
token), as tests/data/eviction expects. Written from the semantics, independent of the C code; reuses only
tests/tools/reference/qwen3_ref.py's weights and helpers.
"""
import json
import sys

import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
import qwen3_ref as R  # noqa: E402

model_dir, ids_path, cfg_path, out = sys.argv[2:6]
ids = [int(x) for x in open(ids_path).read().split(",")]
p = json.load(open(cfg_path))
S, Rc, I = p["start_size"], p["recent_size"], p["intermediate_size"]
M = S + Rc + I
snapkv = p["algorithm"] == "snapkv"
W = p.get("window_size") or 8
assert p["algorithm"] in ("h2o", "snapkv") and p.get("score_aggregation", "sum") == "sum"

m = R.Model(model_dir, dtype=torch.float64)
cfg = m.cfg
nh, nkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
group = nh // nkv
inv = m.inv_freq.to(torch.float64)

# per layer: keys/values [nkv, L, hd], positions [nkv, L], scores [nkv, L] (0 for start slots)
K = [None] * cfg.n_layers
V = [None] * cfg.n_layers
P = [None] * cfg.n_layers
SC = [None] * cfg.n_layers


def rotate(x, delta):
    """x [L, hd] rotated by delta[L] positions (half-split RoPE)."""
    ang = delta.to(torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return x * emb.cos() + R.rotate_half(x) * emb.sin()


def maxpool7(x):
    """centred max-pool, kernel 7, -inf padding, over the last dim."""
    pad = torch.full(x.shape[:-1] + (3,), float("-inf"), dtype=x.dtype)
    y = torch.cat((pad, x, pad), dim=-1)
    return torch.stack([y[..., i:i + x.shape[-1]] for i in range(7)], dim=0).max(dim=0).values


def evict(li, step, trace):
    L = K[li].shape[1]
    if L <= M:
        return
    keeps = []
    for h in range(nkv):
        s = SC[li][h]
        cand = list(range(S, L - Rc))
        cand.sort(key=lambda t: (float(s[t]), t), reverse=True)   # score desc, slot desc
        keep = sorted(list(range(S)) + cand[:I] + list(range(L - Rc, L)))
        keeps.append(keep)
    for h, keep in enumerate(keeps):
        idx = torch.tensor(keep)
        delta = torch.arange(len(keep)) - idx
        K[li][h, :len(keep)] = rotate(K[li][h, idx], delta)
        V[li][h, :len(keep)] = V[li][h, idx]
        P[li][h, :len(keep)] = P[li][h, idx]
        SC[li][h, :len(keep)] = SC[li][h, idx]
    n = len(keeps[0])
    K[li], V[li], P[li], SC[li] = K[li][:, :n], V[li][:, :n], P[li][:, :n], SC[li][:, :n]
    trace.append({"step": step, "layer": li, "kept_positions": [P[li][h].tolist() for h in range(nkv)]})


@torch.no_grad()
def forward(tokens, start_pos, step, trace):
    T = len(tokens)
    pos = torch.arange(start_pos, start_pos + T)
    x = m.embed[torch.tensor(tokens)]
    for li, Lw in enumerate(m.layers):
        h = R.rms_norm(x, Lw["attn_norm"], cfg.eps)
        q = (h @ Lw["wq"].T).view(T, nh, hd).transpose(0, 1)
        k = (h @ Lw["wk"].T).view(T, nkv, hd).transpose(0, 1)
        v = (h @ Lw["wv"].T).view(T, nkv, hd).transpose(0, 1)
        q = R.rms_norm(q, Lw["q_norm"], cfg.eps)
        k = R.rms_norm(k, Lw["k_norm"], cfg.eps)
        q, k = m.rope(q, pos), m.rope(k, pos)
        old = 0 if K[li] is None else K[li].shape[1]
        if K[li] is None:
            K[li], V[li], P[li] = k, v, pos.repeat(nkv, 1)
            SC[li] = torch.zeros(nkv, 0, dtype=torch.float64)
        else:
            K[li] = torch.cat((K[li], k), dim=1)
            V[li] = torch.cat((V[li], v), dim=1)
            P[li] = torch.cat((P[li], pos.repeat(nkv, 1)), dim=1)
        L = K[li].shape[1]
        # causal by slot order: query row i (slot old + i) sees slots <= old + i
        mask = torch.where(torch.arange(L)[None, :] <= (old + torch.arange(T))[:, None], 0.0,
                           float("-inf")).to(torch.float64)
        kk = K[li].repeat_interleave(group, dim=0)
        vv = V[li].repeat_interleave(group, dim=0)
        a = torch.softmax((q @ kk.transpose(1, 2)) * hd ** -0.5 + mask, dim=-1)   # [nh, T, L]
        o = (a @ vv).transpose(0, 1).reshape(T, nh * hd) @ Lw["wo"].T
        x = x + o
        hh = R.rms_norm(x, Lw["ffn_norm"], cfg.eps)
        x = x + (torch.nn.functional.silu(hh @ Lw["w_gate"].T) * (hh @ Lw["w_up"].T)) @ Lw["w_down"].T
        # scores: per query head, then summed over the query heads of each KV head
        if snapkv and old == 0:
            per_q = maxpool7(a[:, -W:, :].sum(dim=1))
        else:
            per_q = a.sum(dim=1)
        contrib = per_q.view(nkv, group, L).sum(dim=1)
        contrib[:, :S] = 0
        n_old = SC[li].shape[1]
        SC[li] = torch.cat((SC[li] + contrib[:, :n_old], contrib[:, n_old:]), dim=1)
        evict(li, step, trace)
    x = R.rms_norm(x, m.norm, cfg.eps)
    return x @ m.lm_head.T


trace, new, chose = [], [], []
logits = forward(ids, 0, 0, trace)[-1]
n_pos = len(ids)
for step in range(1, 33):
    nxt = int(torch.argmax(logits))
    new.append(nxt)
    chose.append(logits.to(torch.float32).numpy())
    if step == 32:
        break
    logits = forward([nxt], n_pos, step, trace)[-1]
    n_pos += 1
with open(out + ".trace.jsonl", "w") as f:
    for e in trace:
        f.write(json.dumps(e) + "\n")
with open(out + ".tokens.json", "w") as f:
    json.dump({"tokens": new}, f)
np.save(out + ".logits.npy", np.stack(chose))
