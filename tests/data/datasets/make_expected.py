#!/usr/bin/python3
"""Expected prompts after LongBench's truncation and chat rules, for test_prompt_tok.c.

Independent of kvbench's C code: templates come from upstream's dataset2prompt.json
(tests/data/longbench/upstream), substitution is Python's str.format as in pred.py, tokenisation is
tests/tools/reference/qwen_tokenizer_ref.py on the Qwen3 tokenizer (tests/data/tokenizer/qwen3), and
the chat wrapper is Qwen3's template for one user turn with enable_thinking=False.

  /usr/bin/python3 tests/data/datasets/make_expected.py > tests/data/datasets/prompts_expected.jsonl
  /usr/bin/python3 tests/data/datasets/make_expected.py --v2 > tests/data/datasets/v2_expected.jsonl

--v2: LongBench v2 prompts of datasets/samples/longbench-v2/data.json with v2 pred.py's
substitution (upstream's prompts/0shot*.txt, fields .strip()ped, sequential str.replace).
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
UPSTREAM = ROOT + "/tests/data/longbench/upstream"
sys.path.insert(0, ROOT + "/tests/tools/reference")
import qwen_tokenizer_ref as ref  # noqa: E402

PROMPTS = json.load(open(UPSTREAM + "/dataset2prompt.json", encoding="utf-8"))
NO_CHAT = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}   # pred.py
tok = ref.Tokenizer(ROOT + "/tests/data/tokenizer/qwen3/tokenizer.json")


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
    tasks = {"v2": "0shot", "v2_cot": "0shot_cot", "v2_no_context": "0shot_no_context", "v2_rag": "0shot_rag"}
    for item in json.load(open(ROOT + "/datasets/samples/longbench-v2/data.json", encoding="utf-8")):
        for task, name in tasks.items():
            tmpl = open("%s/prompts/%s.txt" % (UPSTREAM, name), encoding="utf-8").read()
            prompt = tmpl.replace('$DOC$', item['context'].strip()).replace('$Q$', item['question'].strip()) \
                .replace('$C_A$', item['choice_A'].strip()).replace('$C_B$', item['choice_B'].strip()) \
                .replace('$C_C$', item['choice_C'].strip()).replace('$C_D$', item['choice_D'].strip())
            print(json.dumps({"id": item["_id"], "task": task, "prompt": prompt}, ensure_ascii=False))
    sys.exit(0)

cases = [("tests/data/longbench/%s.head3.jsonl" % t, t, 1000) for t in
         ("multi_news", "multifieldqa_zh", "passage_retrieval_zh")]
cases += [("datasets/samples/%s.jsonl" % t, t, 40) for t in ("trec", "samsum", "qasper", "lcc")]
# NUL characters ("\u0000") in context and input, as in 4 of the official passage_retrieval_zh
# samples: whole and truncated, they must come through byte for byte.
cases += [("tests/data/datasets/nul/passage_retrieval_zh.jsonl", "passage_retrieval_zh", n) for n in (1000, 8000)]
for path, task, max_length in cases:
    for line in open(ROOT + "/" + path, encoding="utf-8"):
        obj = json.loads(line)
        for protocol in ("longbench", "nncf"):
            rec = build(task, obj, protocol, max_length)
            rec["file"] = path
            print(json.dumps(rec, ensure_ascii=False))
