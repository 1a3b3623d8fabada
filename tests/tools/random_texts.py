#!/usr/bin/python3
"""Random tokenizer test texts: words, contractions in all cases, digits of
several scripts, punctuation, every kind of Unicode whitespace, CJK, emoji,
combining marks (NFC), Cyrillic/Arabic/Devanagari, special tokens and
near-misses. Only code points of Unicode <= 14, where the regex and NFC data of
kvbench, Hugging Face's Rust core and its JS port all agree.

usage: random_texts.py SEED N > texts.jsonl
"""
import json, random, sys
random.seed(int(sys.argv[1]))
words = "the quick brown fox jumps over lazy dog hello world It's we'll they're I'd you've I'M DON'T can't 'sup 'twas y'all'd've".split()
pools = [
  list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
  list("0123456789"), list("٣½Ⅻ①１𝟙"),
  list(".,;:!?-()[]{}\"'`’/\\@#$%^&*_+=<>|~"),
  [" ", " ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u0085", "\ufeff", "\u200b", "\u180e", "\u2028", "\u3000", "\u2003", "\x0b", "\x0c"],
  list("你好世界中文日本語でこんにちは한국어안녕"),
  ["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "\u2764\ufe0f"],
  ["e\u0301", "a\u0308", ">\u0338", "\u1100\u1161", "\u0915\u094d\u0937", "\u0301", "n\u0303"],
  list("éüßçøåñÆŒſ"), list("привет мир"), list("مرحبا بالعالم"), list("नमस्ते"),
  ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "<|im_start", "<|IM_END|>", "< |im_end|>", "<tool_call>"],
  ["'s", "'S", "'re", "'RE", "'ll", "'d", "'m", "'ve", "'t", "'ſ"],
]
def piece():
    r = random.random()
    if r < 0.35: return random.choice(words) + random.choice([" ", " ", "", "\n"])
    pool = random.choice(pools)
    return "".join(random.choice(pool) for _ in range(random.randint(1, 6)))
for i in range(int(sys.argv[2])):
    t = "".join(piece() for _ in range(random.randint(1, 30)))
    print(json.dumps({"id": f"r{i}", "text": t}, ensure_ascii=False))
