"""A small Qwen3-architecture causal LM in plain PyTorch (CPU), shared by training, export and eval.

Same maths as Hugging Face's Qwen3 (and tests/tools/reference/qwen3_ref.py): pre-norm blocks,
per-head RMSNorm on queries and keys before NeoX-style RoPE, grouped-query attention, SwiGLU MLP,
tied embeddings. Tokens are bytes: id = byte value, then the special tokens.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_ID = 256


def encode(text):
    """The model's tokenisation: UTF-8 bytes (tokenizer.json with no merges gives the same ids)."""
    return list(text.encode("utf-8"))


def decode(ids):
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class Config:
    def __init__(self, hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=384,
                 vocab=256 + len(SPECIAL_TOKENS), rope_theta=10000.0, rope_scaling=None, eps=1e-6,
                 max_pos=4096):
        self.hidden, self.layers, self.heads, self.kv_heads = hidden, layers, heads, kv_heads
        self.head_dim, self.ffn, self.vocab = head_dim, ffn, vocab
        self.rope_theta, self.rope_scaling, self.eps, self.max_pos = rope_theta, rope_scaling, eps, max_pos

    def shape(self):
        """The constructor arguments that differ between runs (stored in checkpoints)."""
        return {"hidden": self.hidden, "layers": self.layers, "heads": self.heads,
                "kv_heads": self.kv_heads, "head_dim": self.head_dim, "ffn": self.ffn,
                "rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling}

    def inv_freq(self):
        """RoPE's inverse frequencies, with Llama 3's scaling when rope_scaling asks for it: the
        wavelengths above original_max/low_freq_factor are stretched by factor, those below
        original_max/high_freq_factor kept, the band between blended (Hugging Face's formula)."""
        inv = 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float()
                                         / self.head_dim))
        sc = self.rope_scaling
        if not sc or sc.get("rope_type") != "llama3":
            return inv
        factor, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old = sc["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        band = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        return torch.where(band, blended, scaled)

    @classmethod
    def from_hf(cls, hf):
        """The Config of an exported config.json."""
        return cls(hidden=hf["hidden_size"], layers=hf["num_hidden_layers"],
                   heads=hf["num_attention_heads"], kv_heads=hf["num_key_value_heads"],
                   head_dim=hf["head_dim"], ffn=hf["intermediate_size"],
                   rope_theta=hf.get("rope_theta", 10000.0), rope_scaling=hf.get("rope_scaling"))

    def hf_config(self):
        return {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": self.hidden, "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.ffn, "vocab_size": self.vocab,
            "hidden_act": "silu", "rms_norm_eps": self.eps, "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling, "max_position_embeddings": self.max_pos,
            "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "torch_dtype": "float32",
            "use_cache": True, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": self.layers, "initializer_range": 0.02,
            "transformers_version": "4.51.0",
        }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.eps)
        self.k_norm = RMSNorm(c.head_dim, c.eps)

    def qkv(self, x, cos, sin):
        """x [B, T, H] -> q [B, nh, T, hd], k and v [B, nkv, T, hd] (q/k normed and rotated)."""
        c = self.c
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, c.heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, c.kv_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def attend(self, q, k, v, mask):
        """q [B, nh, Tq, hd], k/v [B, nkv, S, hd], mask [Tq, S] additive -> (out [B, Tq, H], probs)."""
        group = self.c.heads // self.c.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = q @ k.transpose(-1, -2) * (self.c.head_dim ** -0.5) + mask
        p = torch.softmax(s, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)
        return self.o_proj(o), p


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.gate_proj = nn.Linear(c.hidden, c.ffn, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.ffn, bias=False)
        self.down_proj = nn.Linear(c.ffn, c.hidden, bias=False)

    def mlp(self, x):
        h = self.post_attention_layernorm(x)
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Qwen3Tiny(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps)
        self.register_buffer("inv_freq", c.inv_freq(), persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * self.c.layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def init_offset_heads(self, offsets=(1, 2, 3, 4), pairs=6, gain=5.0, const=0.5):
        """Start the query heads of layer 0 as fixed-offset heads: head h attends from t to
        t - offsets[h] (an initialisation, not an architecture change). One embedding dimension is
        set to a constant; each KV head's key reads only that dimension into the `pairs` fastest
        RoPE pairs, rotated r positions ahead, and each query head reads it rotated u positions
        back, so query t meets key s best where s = t - r - u. q_norm/k_norm are raised on those
        dimensions so that over 99% of the weight lands on the one offset. With offsets 1..4 the
        residual stream of every position holds its last four tokens, and layer 1 can match
        multi-token keys (an n-gram induction head); from a random start a 2-layer model waits on
        a long plateau for its first head and never finds multi-token matches in an hour of CPU."""
        c, hd = self.c, self.c.head_dim
        half, d, group = hd // 2, c.hidden - 1, c.heads // c.kv_heads
        assert len(offsets) == c.heads
        a = self.layers[0].self_attn
        with torch.no_grad():
            self.embed_tokens.weight[:, d] = const
            a.q_proj.weight.zero_()
            a.k_proj.weight.zero_()
            for g in range(c.kv_heads):
                r = offsets[g * group]                      # the key's shift: the group's first offset
                for i in range(pairs):
                    th = float(self.inv_freq[i])
                    a.k_proj.weight[g * hd + i, d] = math.cos(r * th)
                    a.k_proj.weight[g * hd + i + half, d] = math.sin(r * th)
                    for h in range(g * group, (g + 1) * group):
                        u = offsets[h] - r
                        a.q_proj.weight[h * hd + i, d] = math.cos(u * th)
                        a.q_proj.weight[h * hd + i + half, d] = -math.sin(u * th)
            for w in (a.q_norm.weight, a.k_norm.weight):
                w[:pairs] = gain
                w[half:half + pairs] = gain

    def freeze_offset_heads(self):
        """Keep layer 0's attention pattern fixed while training (values and outputs still learn):
        its decode-time output then depends only on the last four tokens, which every eviction
        policy keeps in its recent window, so eviction shows up in layer 1's retrieval alone."""
        a, d = self.layers[0].self_attn, self.c.hidden - 1
        for p in (a.q_proj.weight, a.k_proj.weight, a.q_norm.weight, a.k_norm.weight):
            p.requires_grad_(False)

        def keep_const(g):                                  # the constant dimension the heads read
            g = g.clone()
            g[..., d] = 0
            return g
        self.embed_tokens.weight.register_hook(keep_const)
        self.layers[0].input_layernorm.weight.register_hook(keep_const)

    def rope(self, pos):
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, ids, hide=None, attention_of=None):
        """ids [B, T] -> logits [B, T, V] (causal attention, training and scoring); hide: an
        additive mask [B, 1, T, T] for the layers after the first (simulated eviction). With
        attention_of = i, the softmax weights [B, heads, T, T] of layer i instead."""
        T = ids.shape[1]
        cos, sin = self.rope(torch.arange(T))
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.embed_tokens(ids)
        for i, L in enumerate(self.layers):
            q, k, v = L.self_attn.qkv(L.input_layernorm(x), cos, sin)
            o, p = L.self_attn.attend(q, k, v, mask if hide is None or i == 0 else mask + hide)
            if i == attention_of:
                return p
            x = x + o
            x = x + L.mlp(x)
        return self.norm(x) @ self.embed_tokens.weight.T

    def param_groups(self, lr, norm_lr_mult, weight_decay):
        """RMSNorm weights (incl. q_norm/k_norm) get norm_lr_mult x the learning rate and no decay:
        q/k norms bound how sharp attention can be, so they must grow for retrieval heads."""
        norms = [p for n, p in self.named_parameters() if p.dim() == 1]
        mats = [p for n, p in self.named_parameters() if p.dim() == 2]
        return [{"params": mats, "lr": lr, "weight_decay": weight_decay, "base_lr": lr},
                {"params": norms, "lr": lr * norm_lr_mult, "weight_decay": 0.0, "base_lr": lr * norm_lr_mult}]

    def hf_state_dict(self):
        """Tensors under Hugging Face Qwen3 names (tied: no lm_head.weight)."""
        return {k: v.detach().float().contiguous() for k, v in self.hf_parameters().items()}

    def load_hf_state_dict(self, tensors):
        with torch.no_grad():
            for name, p in self.hf_parameters().items():
                p.copy_(tensors[name])

    def hf_parameters(self):
        """Hugging Face name -> parameter."""
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight}
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            a = L.self_attn
            out.update({p + "input_layernorm.weight": L.input_layernorm.weight,
                        p + "post_attention_layernorm.weight": L.post_attention_layernorm.weight,
                        p + "self_attn.q_proj.weight": a.q_proj.weight, p + "self_attn.k_proj.weight": a.k_proj.weight,
                        p + "self_attn.v_proj.weight": a.v_proj.weight, p + "self_attn.o_proj.weight": a.o_proj.weight,
                        p + "self_attn.q_norm.weight": a.q_norm.weight, p + "self_attn.k_norm.weight": a.k_norm.weight,
                        p + "mlp.gate_proj.weight": L.gate_proj.weight, p + "mlp.up_proj.weight": L.up_proj.weight,
                        p + "mlp.down_proj.weight": L.down_proj.weight})
        return out
