#!/usr/bin/python3
"""Expected prompts after LongBench's truncation and chat rules, for test_prompt_tok.c.

Independent of kvbench's C code: templates come from ../shared/LONGBENCH.md §2.1 (the JSON literals
of dataset2prompt.json), substitution is Python's str.format as in pred.py, tokenisation is
../shared/reference/qwen_tokenizer_ref.py on the Qwen3 tokenizer, and the chat wrapper is Qwen3's
template for one user turn with enable_thinking=False.

  /usr/bin/python3 tests/data/datasets/make_expected.py > tests/data/datasets/prompts_expected.jsonl
  /usr/bin/python3 tests/data/datasets/make_expected.py --v2 > tests/data/datasets/v2_expected.jsonl

--v2: LongBench v2 prompts of datasets/samples/longbench-v2/data.json with v2 pred.py's
substitution (template from LONGBENCH.md §7, fields .strip()ped, sequential str.replace).
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


if sys.argv[1:] == ["--v2"]:
    sec7 = md[md.index("## 7."):md.index("## 8.")]
    V2 = {m.group(1): json.loads(m.group(2)) for m in re.finditer(r'^(0shot[a-z_]*)\.txt: (".*")$', sec7, re.M)}
    tasks = {"v2": "0shot", "v2_cot": "0shot_cot", "v2_no_context": "0shot_no_context", "v2_rag": "0shot_rag"}
    for item in json.load(open(ROOT + "/datasets/samples/longbench-v2/data.json", encoding="utf-8")):
        for task, name in tasks.items():
            prompt = V2[name].replace('$DOC$', item['context'].strip()).replace('$Q$', item['question'].strip()) \
                .replace('$C_A$', item['choice_A'].strip()).replace('$C_B$', item['choice_B'].strip()) \
                .replace('$C_C$', item['choice_C'].strip()).replace('$C_D$', item['choice_D'].strip())
            print(json.dumps({"id": item["_id"], "task": task, "prompt": prompt}, ensure_ascii=False))
    sys.exit(0)

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
