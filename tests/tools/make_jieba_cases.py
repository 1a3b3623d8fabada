"""Writes tests/data/scorers/jieba_cases.jsonl: random mixed Chinese/ASCII strings
and jieba 0.42.1's accurate-mode segmentation of each (jieba.cut, HMM on), for
tests/unit/score/test_metrics.c. Run with /usr/bin/python3 (Debian's python3-jieba).
"""
import json
import logging
import os
import random

import jieba

jieba.setLogLevel(logging.ERROR)
rng = random.Random(42)
# Common characters, dictionary words, ASCII runs, punctuation and whitespace,
# so that the DAG route, the HMM (unknown words) and the pre-split all matter.
chars = ("的一是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会家可下而过天去能对小多然于心学"
         "么之都好看起发当没成只如事把还用第样道想作种开美总从无情己面最女但现前些所同日手又行意动方期它头经长儿回位分爱老"
         "因很给名法间斯知世什两次使身者被高已亲其进此话常与活正感杭研网易峰会议预算")
words = ["北京", "清华大学", "会议", "人工智能", "技术", "发展", "iPhone", "3.5%", "e-mail", "C++",
         "AT&T", "2024年", "１２", "ＡＢＣ", "café"]
other = list("abcXYZ0123456789.%-+#&_ \t\n\r,。，！？《》“”　·") + ["\r\n"]
out = os.path.join(os.path.dirname(__file__), "..", "data", "scorers", "jieba_cases.jsonl")
with open(out, "w", encoding="utf-8") as f:
    for _ in range(1500):
        parts = []
        for _ in range(rng.randint(0, 30)):
            r = rng.random()
            parts.append(rng.choice(chars) if r < 0.6 else rng.choice(words) if r < 0.75
                         else rng.choice(other))
        text = "".join(parts)
        f.write(json.dumps({"text": text, "tokens": list(jieba.cut(text, cut_all=False))},
                           ensure_ascii=False) + "\n")
