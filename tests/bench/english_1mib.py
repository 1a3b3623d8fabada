#!/usr/bin/python3
"""Writes exactly 1 MiB of English text for `kvbench bench tokenizer`:
Python's own documentation (pydoc_data topics, Debian's python3.11), then
the English news articles of tests/data/longbench/multi_news.head3.jsonl,
repeated until 1 MiB (cut at a character boundary).

usage: english_1mib.py OUT.txt
"""
import json
import os
import sys

from pydoc_data import topics

parts = [topics.topics[k] for k in sorted(topics.topics)]
news = os.path.join(os.path.dirname(__file__), "..", "data", "longbench", "multi_news.head3.jsonl")
parts += [json.loads(line)["context"] for line in open(news, encoding="utf-8")]
text = "\n\n".join(parts).encode("utf-8")
data = (text * (1 + (1 << 20) // len(text)))[: 1 << 20]
data = data.decode("utf-8", errors="ignore").encode("utf-8")
with open(sys.argv[1], "wb") as f:
    f.write(data)
print(f"{sys.argv[1]}: {len(data)} bytes")
