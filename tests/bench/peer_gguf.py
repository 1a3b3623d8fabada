#!/usr/bin/env python3
"""Writes a Qwen3 model folder (config.json, tokenizer.json, one BF16
model.safetensors) as a GGUF file for llama.cpp, so that tests/bench/peer.py
can run llama-bench on the very weights kvbench reads.

    PYTHONPATH=LLAMA_CPP/gguf-py python3 tests/bench/peer_gguf.py MODEL_DIR OUT.gguf

Needs numpy and llama.cpp's gguf-py (its GGUFWriter; not a kvbench
dependency). Matrices stay BF16 byte for byte; the 1-D norm weights become
F32, the layout llama.cpp's own converter gives a BF16 model. The vocabulary
is tokenizer.json's, padded to config.json's vocab_size (the embedding's row
count) with placeholder tokens: the benchmark feeds random token ids and
never tokenizes text, but llama.cpp checks that every embedding row has a
token.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

import gguf

# Hugging Face Qwen3 tensor names -> GGUF names (llama.cpp's qwen3 layout).
LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
GLOBAL_TENSORS = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def fail(msg):
    sys.exit(f"peer_gguf: {msg}")


def gguf_name(hf_name):
    base = hf_name.removesuffix(".weight")
    if base in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[base] + ".weight"
    parts = base.split(".", 3)  # model, layers, N, rest
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_TENSORS:
        return f"blk.{parts[2]}.{LAYER_TENSORS[parts[3]]}.weight"
    fail(f"unknown tensor {hf_name}")


def read_safetensors(path):
    """Yields (name, BF16 bits as uint16 array) in file order, memory-mapped."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    header.pop("__metadata__", None)
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if t["dtype"] != "BF16":
            fail(f"{path}: {name}: dtype {t['dtype']}, only BF16 is supported")
        lo, hi = t["data_offsets"]
        yield name, data[lo:hi].view(np.uint16).reshape(t["shape"])


def vocabulary(model_dir, vocab_size):
    """Tokens, token types and merges from tokenizer.json, padded to vocab_size."""
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tokens = [None] * vocab_size
    types = [gguf.TokenType.NORMAL] * vocab_size
    for text, i in tok["model"]["vocab"].items():
        tokens[i] = text
    for added in tok.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
    pads = [i for i, t in enumerate(tokens) if t is None]
    if not merges:
        # llama.cpp refuses a BPE vocabulary without merges: give it one
        # whose result is the first placeholder token.
        tokens[pads.pop(0)] = "ĠĠ"
        merges = ["Ġ Ġ"]
    for i in pads:
        tokens[i] = f"[PAD{i}]"
        types[i] = gguf.TokenType.UNUSED
    return tokens, types, merges


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, out = Path(sys.argv[1]), sys.argv[2]
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("model_type") != "qwen3":
        fail(f"{model_dir}/config.json: model_type {cfg.get('model_type')!r}, only qwen3 is supported")
    eos = cfg["eos_token_id"]
    w = gguf.GGUFWriter(out, "qwen3")
    w.add_name(model_dir.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    tokens, types, merges = vocabulary(model_dir, cfg["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    w.add_add_bos_token(False)
    for name, bits in read_safetensors(model_dir / "model.safetensors"):
        if bits.ndim == 1:  # norms in F32: BF16 is the high half of an F32
            w.add_tensor(gguf_name(name), (bits.astype(np.uint32) << 16).view(np.float32))
        else:
            w.add_tensor(gguf_name(name), bits, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
