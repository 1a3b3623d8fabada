#!/usr/bin/python3
"""Float64 reference of the scorers tova, keydiff and expected_attention (docs/eviction.md) for the
e2e fixtures, numpy only.

    tools/ref_policies.py REFERENCE_DIR MODEL_DIR PROMPT_IDS CONFIG_JSON OUT_PREFIX

A Qwen3 forward of its own (RMSNorm, q/k norms, half-split RoPE, GQA, SwiGLU; tied or separate
output embedding) in float64 over the weights that REFERENCE_DIR's safetensors_np.py reads, then
eviction as the policies define it, written from their semantics and independent of the C code:

- after every forward, a layer longer than M = start + intermediate + recent keeps its first
  start_size slots, the intermediate_size best candidates (score desc, slot desc on ties; per_group:
  whole groups of group_size from slot start_size, the partial last group with the recent ones) and
  its last recent_size slots; per_token and per_group sum the scores over KV heads, per_head keeps
  a set per KV head;
- tova: the newest query row's attention (own column included), summed over the query heads of each
  KV head, replaced at every forward;
- keydiff: -cos(k_t, anchor), the anchor the mean of the unit keys over all the layer's slots (per KV
  head, as stored: post-RoPE, rerotated);
- expected_attention: mean and biased covariance (two-pass) of the prompt's queries after q_norm,
  before RoPE, rows start_size.. per query head, frozen; at each eviction the mean of the explicit
  RoPE matrices R_p over p = next .. next + n_future - 1 (next = newest position + 1), mu' = Rbar mu,
  Sigma' = Rbar Sigma Rbar^T, z = mu'.k / sqrt(D) + k^T Sigma' k / (2D), softmax over slots
  start_size.. per query head, mean over the KV head's query heads, (+ epsilon) x ||v|| if use_vnorm.

Kept keys are rotated by (new slot - old slot); new tokens keep their absolute positions. Greedy,
32 new tokens, EOS ignored. Writes OUT_PREFIX.trace.jsonl ({"step", "layer", "kept_positions"},
per KV head for per_head), OUT_PREFIX.tokens.json and OUT_PREFIX.logits.npy (float32 [32, vocab]:
the logits that chose each token), as tests/data/eviction expects.
"""
import json
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import safetensors_np  # noqa: E402
from ref_fixture import write_greedy_fixture  # noqa: E402

model_dir, ids_path, cfg_path, out = sys.argv[2:6]
ids = [int(x) for x in open(ids_path).read().split(",")]
p = json.load(open(cfg_path))
ALGO = p["algorithm"]
STRATEGY = p.get("strategy", "per_token")
S, Rc, I = p["start_size"], p["recent_size"], p["intermediate_size"]
G = p.get("group_size", 32) if STRATEGY == "per_group" else 1
M = S + Rc + I
NF = p.get("ea_n_future_positions", 512)
USE_COV = p.get("ea_use_covariance", True)
USE_VNORM = p.get("ea_use_vnorm", True)
EPS = p.get("ea_epsilon", 0.0)
assert ALGO in ("tova", "keydiff", "expected_attention", "h2o")
assert p.get("score_aggregation", "sum") == "sum" and p.get("apply_rerotation", True)
assert p.get("refined_size", 0) == 0

cfg = json.load(open(model_dir + "/config.json"))
assert cfg["model_type"] == "qwen3" and not cfg.get("rope_scaling")
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
group = nh // nkv
eps = cfg.get("rms_norm_eps", 1e-6)
raw = safetensors_np.load_folder(model_dir)
W = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
embed = W["model.embed_tokens.weight"]
lm_head = embed if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
inv = 1.0 / (float(cfg["rope_theta"]) ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
n_sets = nkv if STRATEGY == "per_head" else 1


def lw(i, name):
    return W[f"model.layers.{i}.{name}"]


def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rot_half(x):
    h = x.shape[-1] // 2
    return np.concatenate((-x[..., h:], x[..., :h]), axis=-1)


def rope(x, pos):
    """x [..., T, hd] at positions pos [T] (or a scalar delta per row)."""
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate((ang, ang), axis=-1)
    return x * np.cos(emb) + rot_half(x) * np.sin(emb)


def rope_matrix(pos):
    """The D x D matrix of RoPE at one position: rope(x, [pos]) == R @ x."""
    return rope(np.eye(hd), np.full(hd, pos)).T                       # column j = R e_j


nl = cfg["num_hidden_layers"]
K = [None] * nl      # [nkv, L, hd] as stored (post-RoPE, rerotated)
V = [None] * nl
P = [None] * nl      # [nkv, L] absolute positions
SC = [None] * nl     # [n_sets, L] tova's latest scores
MU = [None] * nl     # [nh, hd] expected_attention's frozen statistics
COV = [None] * nl    # [nh, hd, hd]


def keydiff_scores(li):
    """[nkv, L]: -cos(k_t, anchor) per KV head."""
    k = K[li]
    unit = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), 1e-12)
    anchor = unit.mean(axis=1)                                        # [nkv, hd]
    dots = np.einsum("hld,hd->hl", k, anchor)
    den = np.maximum(np.linalg.norm(k, axis=-1) * np.linalg.norm(anchor, axis=-1)[:, None], 1e-8)
    return -dots / den


def expected_scores(li):
    """[nkv, L] (slots < S zero): expected attention of the next NF queries."""
    L = K[li].shape[1]
    nxt = int(P[li][0].max()) + 1
    rbar = sum(rope_matrix(q) for q in range(nxt, nxt + NF)) / NF
    out = np.zeros((nkv, L))
    for g in range(nkv):
        k = K[li][g, S:]                                              # [L-S, hd]
        acc = np.zeros(L - S)
        for h in range(g * group, (g + 1) * group):
            mu = rbar @ MU[li][h]
            z = k @ mu / np.sqrt(hd)
            if USE_COV:
                cov = rbar @ COV[li][h] @ rbar.T
                z = z + np.einsum("ld,de,le->l", k, cov, k) / (2 * hd)
            e = np.exp(z - z.max())
            acc += e / e.sum() / group
        if USE_VNORM:
            acc = (acc + EPS) * np.linalg.norm(V[li][g, S:], axis=-1)
        out[g, S:] = acc
    return out


def set_scores(li):
    """[n_sets, L] selection scores of the layer's sets."""
    if ALGO in ("tova", "h2o"):
        return SC[li]
    per_kv = keydiff_scores(li) if ALGO == "keydiff" else expected_scores(li)
    return per_kv if n_sets > 1 else per_kv.sum(axis=0, keepdims=True)


def select(s, L):
    """Kept slots of one set of L slots, ascending."""
    n = L - S
    n_units = -(-n // G)
    n_cand = max(n_units - Rc // G, 0)
    units = [(sum(float(s[S + u * G + r]) for r in range(G)), u) for u in range(n_cand)]
    units.sort(reverse=True)                                          # score desc, unit desc
    chosen = {u for _, u in units[:I // G]} | set(range(n_cand, n_units))
    keep = list(range(min(S, L)))
    for u in sorted(chosen):
        keep += [t for t in range(S + u * G, S + (u + 1) * G) if t < L]
    return keep


def evict(li, step, trace):
    L = K[li].shape[1]
    if L <= M:
        return
    s = set_scores(li)
    keeps = [select(s[g], L) for g in range(n_sets)]
    heads = [[g] for g in range(nkv)] if n_sets > 1 else [list(range(nkv))]
    n = len(keeps[0])
    k2, v2, p2 = K[li][:, :n].copy(), V[li][:, :n].copy(), P[li][:, :n].copy()
    sc2 = SC[li][:, :n].copy()
    for g, keep in enumerate(keeps):
        idx = np.array(keep)
        delta = np.arange(n) - idx
        for h in heads[g]:
            k2[h] = rope(K[li][h, idx], delta)
            v2[h], p2[h] = V[li][h, idx], P[li][h, idx]
        sc2[g] = SC[li][g, idx]
    K[li], V[li], P[li], SC[li] = k2, v2, p2, sc2
    kept = [P[li][g].astype(int).tolist() for g in range(nkv)] if n_sets > 1 \
        else P[li][0].astype(int).tolist()
    trace.append({"step": step, "layer": li, "kept_positions": kept})


def forward(tokens, start_pos, step, trace):
    T = len(tokens)
    pos = np.arange(start_pos, start_pos + T)
    x = embed[np.array(tokens)]
    for li in range(nl):
        h = rms(x, lw(li, "input_layernorm.weight"))
        q = (h @ lw(li, "self_attn.q_proj.weight").T).reshape(T, nh, hd).transpose(1, 0, 2)
        k = (h @ lw(li, "self_attn.k_proj.weight").T).reshape(T, nkv, hd).transpose(1, 0, 2)
        v = (h @ lw(li, "self_attn.v_proj.weight").T).reshape(T, nkv, hd).transpose(1, 0, 2)
        q = rms(q, lw(li, "self_attn.q_norm.weight"))
        k = rms(k, lw(li, "self_attn.k_norm.weight"))
        if ALGO == "expected_attention" and K[li] is None:            # the prompt's queries
            rows = q[:, S:]                                           # [nh, T-S, hd]
            MU[li] = rows.mean(axis=1) if rows.shape[1] else np.zeros((nh, hd))
            c = rows - MU[li][:, None, :]
            COV[li] = np.einsum("hti,htj->hij", c, c) / max(rows.shape[1], 1)
        q, k = rope(q, pos), rope(k, pos)
        old = 0 if K[li] is None else K[li].shape[1]
        if K[li] is None:
            K[li], V[li], P[li] = k, v, np.tile(pos, (nkv, 1))
            SC[li] = np.zeros((n_sets, 0))
        else:
            K[li] = np.concatenate((K[li], k), axis=1)
            V[li] = np.concatenate((V[li], v), axis=1)
            P[li] = np.concatenate((P[li], np.tile(pos, (nkv, 1))), axis=1)
        L = K[li].shape[1]
        mask = np.where(np.arange(L)[None, :] <= (old + np.arange(T))[:, None], 0.0, -np.inf)
        kk = np.repeat(K[li], group, axis=0)
        vv = np.repeat(V[li], group, axis=0)
        sc = q @ kk.transpose(0, 2, 1) / np.sqrt(hd) + mask
        a = np.exp(sc - sc.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)                                 # [nh, T, L]
        o = (a @ vv).transpose(1, 0, 2).reshape(T, nh * hd) @ lw(li, "self_attn.o_proj.weight").T
        x = x + o
        hh = rms(x, lw(li, "post_attention_layernorm.weight"))
        gt = hh @ lw(li, "mlp.gate_proj.weight").T
        x = x + (gt / (1 + np.exp(-gt)) * (hh @ lw(li, "mlp.up_proj.weight").T)) @ \
            lw(li, "mlp.down_proj.weight").T
        rows = a[:, -1:, :] if ALGO == "tova" else a                  # tova: the newest row only
        contrib = rows.sum(axis=1).reshape(n_sets, nh // n_sets, L).sum(axis=1)
        contrib[:, :S] = 0
        if ALGO == "h2o":                                             # a check of the forward
            n_old = SC[li].shape[1]
            contrib[:, :n_old] += SC[li]
        SC[li] = contrib
        evict(li, step, trace)
    x = rms(x, W["model.norm.weight"])
    return x @ lm_head.T


write_greedy_fixture(forward, ids, out)
