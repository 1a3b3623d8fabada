#!/usr/bin/python3
"""Seeded generator of kvbench's synthetic long-context retrieval tasks (LongBench JSONL schema).

Three tasks, each a haystack (`context`) and a question (`input`) whose prompt ends so that the
first answer token is the answer itself:

  synth_passkey   a 5-digit pass key at a random depth of filler text
  synth_kv        many `key:value` lines (3-letter keys, 4-digit values); one key is asked
  synth_passage   numbered paragraphs of pseudo-words; the tail of one paragraph is quoted and
                  the paragraph's number is asked

The prompt of a sample is TEMPLATES[task].format(context=..., input=...). The shipped model reads
bytes (one token per byte), so lengths below are byte counts = token counts of the full prompt.

This module is also imported by tools/train/train.py, so training prompts are built by exactly the
same code as the evaluation files (with different seeds).

  tools/synth/synth.py --out datasets/synthetic          # writes the evaluation files
"""
import argparse
import json
import os
import random

TEMPLATES = {
    "synth_passkey": "There is a pass key hidden in the text below. Find it and remember it.\n\n"
                     "{context}\n\n{input}",
    "synth_kv": "Below is a list of keys and their values. Remember the value of every key.\n\n"
                "{context}\n\n{input}",
    "synth_passage": "Below are numbered paragraphs. Each one ends with its number in brackets.\n\n"
                     "{context}\n\n{input}",
}
# LongBench metric (docs/longbench.md) and max new tokens per task.
METRICS = {"synth_passkey": ("count_score", 8), "synth_kv": ("count_score", 8),
           "synth_passage": ("retrieval_score", 6)}

CLASSIC_FILLER = ("The grass is green. The sky is blue. The sun is yellow. "
                  "Here we go. There and back again. ")
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vi", "so", "pe", "da", "gu", "fo", "zi", "be",
             "mo", "la", "ki", "nu", "re", "sa", "to", "ve", "wi", "ho", "ja", "ce", "xo", "yu"]


def pseudo_words(rng, n):
    """A vocabulary of n distinct pronounceable lowercase words of 1-3 syllables."""
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))))
    return sorted(words)


def word_filler(rng, vocab, nbytes):
    """Sentences of random words (no digits), at least nbytes long."""
    out, size = [], 0
    while size < nbytes:
        n = rng.randint(4, 10)
        s = " ".join(rng.choice(vocab) for _ in range(n))
        s = s[0].upper() + s[1:] + ". "
        out.append(s)
        size += len(s)
    return out


def classic_filler(nbytes):
    reps = nbytes // len(CLASSIC_FILLER) + 1
    return [s + ". " for s in CLASSIC_FILLER.split(". ") if s.strip()] * reps


def fit(pieces, budget):
    """Longest prefix of the sentence list that fits in `budget` bytes."""
    out, size = [], 0
    for p in pieces:
        if size + len(p) > budget:
            break
        out.append(p)
        size += len(p)
    return out


def prompt_len(task, context, question):
    return len(TEMPLATES[task].format(context=context, input=question).encode("utf-8"))


def make_passkey(rng, length, depth, filler="mixed", vocab=None):
    key = str(rng.randint(10000, 99999))
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    question = "What is the pass key? The pass key is "
    overhead = prompt_len("synth_passkey", "", question) + len(needle)
    budget = max(0, length - overhead)
    use_words = filler == "words" or (filler == "mixed" and rng.random() < 0.5)
    pieces = word_filler(rng, vocab, budget) if use_words else classic_filler(budget)
    pieces = fit(pieces, budget)
    at = round(depth * len(pieces))
    context = ("".join(pieces[:at]) + needle + "".join(pieces[at:])).rstrip()
    return context, question, [key]


def random_key(rng):
    # Three letters and no space before the value: the demo model matches the last four tokens
    # (its layer 0 sees four back), so the whole key plus the colon fits in what it can compare.
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3))


def make_kv(rng, length):
    """The context and one (question, answers) per line, in context order."""
    line_len = len("abc:1234\n")
    n_lines = max(2, (length - prompt_len("synth_kv", "", kv_question("abc", "")[0])) // line_len)
    keys = set()
    while len(keys) < n_lines:
        keys.add(random_key(rng))
    keys = list(keys)
    rng.shuffle(keys)
    values = [str(rng.randint(1000, 9999)) for _ in keys]
    context = "\n".join(f"{k}:{v}" for k, v in zip(keys, values))
    return context, [kv_question(k, v) for k, v in zip(keys, values)]


def kv_question(key, value):
    return f"What is the value of key {key}?\n{key}:", [value]


def make_passage(rng, length, vocab):
    """The context and one (question, answers) per paragraph, in context order."""
    question_words = 4
    paragraphs, size = [], 0
    budget = length - prompt_len("synth_passage", "", "") - 60
    while True:
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 20)))
        n = len(paragraphs) + 1
        para = f"{text} [{n}]"
        if size + len(para) + 1 > budget and len(paragraphs) >= 2:
            break
        paragraphs.append((text, para))
        size += len(para) + 1
    context = "\n".join(p for _, p in paragraphs)
    return context, [passage_question(text, i + 1, question_words) for i, (text, _) in enumerate(paragraphs)]


def passage_question(text, number, question_words):
    tail = " ".join(text.split()[-question_words:])
    return f"Which paragraph ends with \"{tail}\"?\n{tail} [", [f"Paragraph {number}"]


def make_sample(task, rng, length, depth, vocab, filler="mixed", extra=0):
    """(context, question, answers) with the asked item at `depth`; with extra > 0 (training),
    also a list of up to `extra` further (question, answers) pairs on the same context."""
    if task == "synth_passkey":
        c, q, a = make_passkey(rng, length, depth, filler, vocab)
        return (c, q, a, []) if extra else (c, q, a)
    c, qa = make_kv(rng, length) if task == "synth_kv" else make_passage(rng, length, vocab)
    target = min(len(qa) - 1, round(depth * len(qa)))
    q, a = qa[target]
    if not extra:
        return c, q, a
    others = qa[:target] + qa[target + 1:]
    return c, q, a, rng.sample(others, min(extra, len(others)))


def record(task, idx, context, question, answers):
    return {"input": question, "context": context, "answers": answers,
            "length": prompt_len(task, context, question), "dataset": task, "language": "en",
            "all_classes": None, "_id": f"{task}-{idx:04d}"}


def write_eval(out_dir, seed, per_length, lengths, depth_range):
    os.makedirs(out_dir, exist_ok=True)
    for ti, task in enumerate(TEMPLATES):
        rng = random.Random(seed * 1000 + ti)
        vocab = pseudo_words(rng, 1500)
        path = os.path.join(out_dir, task + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            idx = 0
            for _ in range(per_length):
                for length in lengths:  # interleaved: the first N samples (--limit N) mix lengths
                    depth = rng.uniform(*depth_range)
                    c, q, a = make_sample(task, rng, length, depth, vocab, filler="classic")
                    f.write(json.dumps(record(task, idx, c, q, a), ensure_ascii=False) + "\n")
                    idx += 1
        print(f"{path}: {idx} samples")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="datasets/synthetic")
    ap.add_argument("--seed", type=int, default=20261129, help="evaluation seed (training uses others)")
    ap.add_argument("--per-length", type=int, default=30)
    ap.add_argument("--lengths", default="1024,1536,2048")
    ap.add_argument("--depth", default="0.1,0.8", help="needle depth range as a fraction of the context")
    a = ap.parse_args()
    write_eval(a.out, a.seed, a.per_length, [int(x) for x in a.lengths.split(",")],
               tuple(float(x) for x in a.depth.split(",")))


if __name__ == "__main__":
    main()
