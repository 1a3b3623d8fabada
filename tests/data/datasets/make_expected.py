#!/usr/bin/python3
"""Expected prompts after LongBench's truncation and chat rules, for test_prompt_tok.c.

Independent of kvbench's C code: templates come from ../shared/LONGBENCH.md §2.1 (the JSON literals
of dataset2prompt.json), substitution is Python's str.format as in pred.py, tokenisation is
../shared/reference/qwen_tokenizer_ref.py on the Qwen3 tokenizer, and the chat wrapper is Qwen3's
template for one user turn with enable_thinking=False.

  /usr/bin/python3 tests/data/datasets/make_expected.py > tests/data/datasets/prompts_expected.jsonl
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
SHARED = ROOT + "/../shared"
sys.path.insert(0, SHARED + "/reference")
import qwen_tokenizer_ref as ref  # noqa: E402

md = open(SHARED + "/LONGBENCH.md", encoding="utf-8").read()
sec = md[md.index("### 2.1"):md.index("### 2.2")]
PROMPTS = {m.group(1): json.loads("{%s}" % m.group(0))[m.group(1)]
           for m in re.finditer(r'^"([a-z0-9_\-]+)": ".*"$', sec, re.M)}
NO_CHAT = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}   # pred.py
tok = ref.Tokenizer(SHARED + "/fixtures/qwen3-tokenizer/tokenizer.json")


def build(task, obj, protocol, max_length):
    prompt = PROMPTS[task].format(**obj)
    ids = tok.encode(prompt)                      # Qwen3 adds no BOS
    truncated = len(ids) > max_length
    if truncated:
        half = int(max_length / 2)
        prompt = tok.decode(ids[:half], skip_special=True) + tok.decode(ids[-half:], skip_special=True)
    chat = protocol == "nncf" or task not in NO_CHAT
    if chat:
        prompt = ref.chat_prompt(prompt, think=False)
    return {"id": obj["_id"], "task": task, "protocol": protocol, "max_length": max_length,
            "n_tokens": len(tok.encode(prompt)), "truncated": truncated, "chat": chat, "prompt": prompt}


cases = [("fixtures/longbench/%s.head3.jsonl" % t, t, 1000) for t in
         ("multi_news", "multifieldqa_zh", "passage_retrieval_zh")]
cases += [("datasets/samples/%s.jsonl" % t, t, 40) for t in ("trec", "samsum", "qasper", "lcc")]
for path, task, max_length in cases:
    full = (SHARED + "/" + path) if path.startswith("fixtures") else (ROOT + "/" + path)
    for line in open(full, encoding="utf-8"):
        obj = json.loads(line)
        for protocol in ("longbench", "nncf"):
            rec = build(task, obj, protocol, max_length)
            rec["file"] = path
            print(json.dumps(rec, ensure_ascii=False))
