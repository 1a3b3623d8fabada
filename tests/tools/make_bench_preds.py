"""Writes a LongBench-shaped prediction folder for scorer benchmarks.

    /usr/bin/python3 tests/tools/make_bench_preds.py OUT_DIR

Text comes from the real LongBench samples in tests/data/longbench
(multi_news for English, multifieldqa_zh / passage_retrieval_zh for Chinese):
predictions and answers are random runs of its sentences, sized like real
model outputs (summaries of 100-500 words against 300-700 word references,
short QA answers, code lines). Deterministic (seeded).
"""
import json
import os
import random
import re
import sys

FIX = os.path.join(os.path.dirname(__file__), "..", "data", "longbench")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(2024)


def texts(name):
    return [json.loads(l)["context"] for l in open(os.path.join(FIX, name + ".head3.jsonl"))]


en_sents = [s.strip() + "." for t in texts("multi_news") for s in t.split(".") if len(s.split()) > 3]
zh_text = "".join(texts("multifieldqa_zh") + texts("passage_retrieval_zh"))
zh_sents = [s + "。" for s in re.split("[。\n]", zh_text) if len(s) > 5]
words = " ".join(en_sents).split()
classes = json.load(open(os.path.join(FIX, "all_classes.json")))


def en(nwords):
    s = []
    while sum(len(x.split()) for x in s) < nwords:
        s.append(rng.choice(en_sents))
    return " ".join(s)


def zh(nchars):
    s = ""
    while len(s) < nchars:
        s += rng.choice(zh_sents)
    return s


def phrase(lo, hi):
    i = rng.randrange(len(words) - hi)
    return " ".join(words[i:i + rng.randint(lo, hi)])


def code():
    ids = ["x", "self.value", "result", "items[i]", "node.next", "count", "buffer"]
    return "%s%s = %s(%s, %d)" % (" " * rng.choice([0, 4, 8, 12]), rng.choice(ids), rng.choice(
        ["compute", "get", "max", "len", "update"]), rng.choice(ids), rng.randint(0, 99))


def write(task, n, make):
    with open(os.path.join(out, task + ".jsonl"), "w") as f:
        for _ in range(n):
            pred, answers, all_classes = make()
            f.write(json.dumps({"pred": pred, "answers": answers, "all_classes": all_classes,
                                "length": rng.randint(1000, 12000)}, ensure_ascii=False) + "\n")


for task in ["gov_report", "multi_news", "qmsum"]:
    write(task, 200, lambda: (en(rng.randint(100, 500)), [en(rng.randint(300, 700))], None))
write("samsum", 200, lambda: (en(40) + "\n" + en(20), [en(30)], None))
for task in ["narrativeqa", "qasper", "hotpotqa", "2wikimqa", "musique", "multifieldqa_en"]:
    write(task, 200, lambda: (phrase(1, 30), [phrase(1, 8) for _ in range(rng.randint(1, 3))], None))
write("triviaqa", 200, lambda: (phrase(1, 10) + "\n" + phrase(5, 20), [phrase(1, 4), phrase(1, 4)], None))
write("trec", 200, lambda: (", ".join(rng.sample(classes["trec"], 2)), [rng.choice(classes["trec"])],
                            classes["trec"]))
write("lsht", 200, lambda: ("，".join(rng.sample(classes["lsht"], 2)), [rng.choice(classes["lsht"])],
                            classes["lsht"]))
write("passage_count", 200, lambda: ("There are %d unique paragraphs." % rng.randint(1, 40),
                                     [str(rng.randint(1, 40))], None))
write("passage_retrieval_en", 200, lambda: ("Paragraph %d" % rng.randint(1, 30),
                                            ["Paragraph %d" % rng.randint(1, 30)], None))
write("passage_retrieval_zh", 200, lambda: ("段落%d" % rng.randint(1, 30), ["段落%d" % rng.randint(1, 30)],
                                            None))
for task in ["lcc", "repobench-p"]:
    write(task, 500, lambda: ("\n".join(code() for _ in range(3)), [code()], None))
write("multifieldqa_zh", 200, lambda: (zh(rng.randint(5, 60)), [zh(rng.randint(5, 30))], None))
for task in ["dureader", "vcsum"]:
    write(task, 200, lambda: (zh(rng.randint(100, 400)), [zh(rng.randint(200, 500))], None))
