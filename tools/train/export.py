#!/usr/bin/python3
"""Export a training checkpoint as an ordinary Hugging Face Qwen3 folder.

Writes config.json, generation_config.json, model.safetensors (F32, tied embeddings),
tokenizer.json (byte-level BPE: the 256 GPT-2 byte symbols with id = byte value, no merges, Qwen's
pre-tokenizer, three special tokens) and tokenizer_config.json. Needs only torch and the standard
library.

  tools/train/export.py --ckpt tools/train/runs/main/best.pt --out models/kvbench-retrieval
"""
import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import EOS_ID, SPECIAL_TOKENS, Config, Qwen3Tiny  # noqa: E402

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content"
                 " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                 "{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (printable Latin-1 bytes map to themselves)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def tokenizer_json():
    enc = bytes_to_unicode()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    added = [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SPECIAL_TOKENS)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {enc[b]: b for b in range(256)}, "merges": []},
    }


def tokenizer_config():
    return {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
        "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "errors": "replace", "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer", "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(256 + i): {"content": t, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}
                                 for i, t in enumerate(SPECIAL_TOKENS)},
    }


def save_safetensors(tensors, path, metadata):
    """F32 safetensors: 8-byte header length, JSON header, then the raw little-endian data."""
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)                         # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def export(ckpt_path, out):
    ck = torch.load(ckpt_path)
    cfg = Config(**ck.get("config", {}))     # older checkpoints: the default shape
    model = Qwen3Tiny(cfg)
    model.load_state_dict(ck["model"])
    os.makedirs(out, exist_ok=True)
    save_safetensors(model.hf_state_dict(), os.path.join(out, "model.safetensors"),
                     {"format": "pt", "step": str(ck.get("step", ""))})
    write_json(os.path.join(out, "config.json"), cfg.hf_config())
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": EOS_ID, "eos_token_id": [EOS_ID, 258], "pad_token_id": EOS_ID,
                "do_sample": False, "transformers_version": "4.51.0"})
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_json())
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config())
    return ck


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", default="models/kvbench-retrieval")
    a = ap.parse_args()
    ck = export(a.ckpt, a.out)
    print(f"exported step {ck.get('step')} to {a.out}")


if __name__ == "__main__":
    main()
