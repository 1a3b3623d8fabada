"""A minimal Python reference of LongBench's scorer, for benchmarks and checks.

LongBench's eval.py needs `rouge` (PyPI 1.0.1) and `fuzzywuzzy`, which Debian
does not package without python-Levenshtein; this file re-creates the code
paths eval.py runs, written from the semantics in docs/longbench.md: metrics.py's
functions, rouge 1.0.1's Rouge-L (all three metrics are computed, like
Rouge().get_scores does, with its recursive LCS backtrack), fuzz.ratio on
difflib, and jieba from python3-jieba.

    /usr/bin/python3 tests/tools/longbench_ref.py FILE.jsonl|DIR [--per-line]
"""
import difflib
import json
import os
import re
import string
import sys
import time
from collections import Counter

import jieba

jieba.setLogLevel(60)


# ---- rouge 1.0.1 (pltrdy/rouge), the parts Rouge().get_scores runs -------------
def _ngrams(n, text):
    return set(tuple(text[i:i + n]) for i in range(len(text) - n + 1))


def _split_into_words(sentences):
    return [w for s in sentences for w in s.split(" ")]


def _rouge_n(evaluated, reference, n):
    if len(evaluated) <= 0 or len(reference) <= 0:
        raise ValueError("Collections must contain at least 1 sentence.")
    e = _ngrams(n, _split_into_words(evaluated))
    r = _ngrams(n, _split_into_words(reference))
    overlap = len(e & r)
    p = 0.0 if len(e) == 0 else overlap / len(e)
    rc = 0.0 if len(r) == 0 else overlap / len(r)
    return 2.0 * ((p * rc) / (p + rc + 1e-8))


def _lcs(x, y):
    n, m = len(x), len(y)
    table = {}
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 or j == 0:
                table[i, j] = 0
            elif x[i - 1] == y[j - 1]:
                table[i, j] = table[i - 1, j - 1] + 1
            else:
                table[i, j] = max(table[i - 1, j], table[i, j - 1])
    return table


def _recon_lcs(x, y):
    table = _lcs(x, y)

    def _recon(i, j):
        if i == 0 or j == 0:
            return []
        elif x[i - 1] == y[j - 1]:
            return _recon(i - 1, j - 1) + [(x[i - 1], i)]
        elif table[i - 1, j] > table[i, j - 1]:
            return _recon(i - 1, j)
        else:
            return _recon(i, j - 1)

    return set(w for w, _ in _recon(len(x), len(y)))


def _rouge_l(evaluated, reference):
    if len(evaluated) <= 0 or len(reference) <= 0:
        raise ValueError("Collections must contain at least 1 sentence.")
    m = len(set(_split_into_words(reference)))
    n = len(set(_split_into_words(evaluated)))
    union = set()
    for r in reference:
        for h in evaluated:
            union |= _recon_lcs(r.split(" "), h.split(" "))
    llcs = len(union)
    r_lcs, p_lcs = llcs / m, llcs / n
    return 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8))


def rouge_get_scores_l(hyp, ref):
    hyp = [" ".join(_.split()) for _ in hyp.split(".") if len(_) > 0]
    ref = [" ".join(_.split()) for _ in ref.split(".") if len(_) > 0]
    _rouge_n(hyp, ref, 1)
    _rouge_n(hyp, ref, 2)
    return 0 + _rouge_l(hyp, ref) / 1


# ---- fuzzywuzzy 0.18 fuzz.ratio on difflib ----------------------------------------
def fuzz_ratio(s1, s2):
    if s1 == s2:
        return 100
    if len(s1) == 0 or len(s2) == 0:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, s1, s2).ratio()))


# ---- LongBench/metrics.py ---------------------------------------------------------------
def normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


CN_PUNCT = ("！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿"
            "–—‘’‛“”„‟…‧﹏.")
ALL_PUNCT = set(string.punctuation + CN_PUNCT)


def normalize_zh_answer(s):
    return "".join("".join(ch for ch in s.lower() if ch not in ALL_PUNCT).split())


def f1_score(prediction, ground_truth):
    common = Counter(prediction) & Counter(ground_truth)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction)
    recall = 1.0 * num_same / len(ground_truth)
    return (2 * precision * recall) / (precision + recall)


def qa_f1_score(prediction, ground_truth, **kwargs):
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def qa_f1_zh_score(prediction, ground_truth, **kwargs):
    p = [normalize_zh_answer(t) for t in jieba.cut(prediction, cut_all=False)]
    g = [normalize_zh_answer(t) for t in jieba.cut(ground_truth, cut_all=False)]
    return f1_score([t for t in p if len(t) > 0], [t for t in g if len(t) > 0])


def rouge_score(prediction, ground_truth, **kwargs):
    try:
        return rouge_get_scores_l(prediction, ground_truth)
    except:  # noqa: E722 -- as metrics.py
        return 0.0


def rouge_zh_score(prediction, ground_truth, **kwargs):
    prediction = " ".join(list(jieba.cut(prediction, cut_all=False)))
    ground_truth = " ".join(list(jieba.cut(ground_truth, cut_all=False)))
    return rouge_score(prediction, ground_truth)


def classification_score(prediction, ground_truth, **kwargs):
    em_match_list = [c for c in kwargs["all_classes"] if c in prediction]
    for match_term in em_match_list:
        if match_term in ground_truth and match_term != ground_truth:
            em_match_list.remove(match_term)
    return 1.0 / len(em_match_list) if ground_truth in em_match_list else 0.0


def _digit_share(prediction, target):
    numbers = re.findall(r"\d+", prediction)
    right = sum(1 for n in numbers if str(n) == str(target))
    return float(0.0 if len(numbers) == 0 else right / len(numbers))


def retrieval_score(prediction, ground_truth, **kwargs):
    return _digit_share(prediction, re.findall(r"Paragraph (\d+)", ground_truth)[0])


def retrieval_zh_score(prediction, ground_truth, **kwargs):
    return _digit_share(prediction, re.findall(r"段落(\d+)", ground_truth)[0])


def count_score(prediction, ground_truth, **kwargs):
    return _digit_share(prediction, ground_truth)


def code_sim_score(prediction, ground_truth, **kwargs):
    prediction_line = ""
    for line in prediction.lstrip("\n").split("\n"):
        if ("`" not in line) and ("#" not in line) and ("//" not in line):
            prediction_line = line
            break
    return fuzz_ratio(prediction_line, ground_truth) / 100


DATASET2METRIC = {
    "narrativeqa": qa_f1_score, "qasper": qa_f1_score, "multifieldqa_en": qa_f1_score,
    "multifieldqa_zh": qa_f1_zh_score, "hotpotqa": qa_f1_score, "2wikimqa": qa_f1_score,
    "musique": qa_f1_score, "dureader": rouge_zh_score, "gov_report": rouge_score,
    "qmsum": rouge_score, "multi_news": rouge_score, "vcsum": rouge_zh_score,
    "trec": classification_score, "triviaqa": qa_f1_score, "samsum": rouge_score,
    "lsht": classification_score, "passage_retrieval_en": retrieval_score,
    "passage_count": count_score, "passage_retrieval_zh": retrieval_zh_score,
    "lcc": code_sim_score, "repobench-p": code_sim_score,
}


def score_line(dataset, prediction, answers, all_classes):
    if dataset in ["trec", "triviaqa", "samsum", "lsht"]:
        prediction = prediction.lstrip("\n").split("\n")[0]
    s = 0.0
    for gt in answers:
        s = max(s, DATASET2METRIC[dataset](prediction, gt, all_classes=all_classes))
    return s


# ---- eval.py's loop -------------------------------------------------------------------------
def main():
    path = sys.argv[1]
    per_line = "--per-line" in sys.argv
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if f.endswith("jsonl"))
    t0 = time.perf_counter()
    n = 0
    for f in files:
        rows = [json.loads(line) for line in open(f, encoding="utf-8") if line.strip()]
        groups = {}
        for r in rows:
            ds = r.get("dataset") or os.path.basename(f).split(".")[0]
            groups.setdefault(ds, []).append(r)
        for ds, rs in sorted(groups.items()):
            classes = rs[-1].get("all_classes")
            t1 = time.perf_counter()
            total = 0.0
            for r in rs:
                s = score_line(ds, r.get("pred", r.get("prediction")), r["answers"], classes)
                total += s
                n += 1
                if per_line:
                    print(json.dumps({"id": r.get("id", r.get("_id")), "dataset": ds,
                                      "score": s}))
            if not per_line:
                dt = time.perf_counter() - t1
                print("%-22s %5d %8.2f %10.1f ms %10.0f preds/s" % (
                    ds, len(rs), round(100 * total / len(rs), 2), dt * 1e3, len(rs) / dt))
    sys.stderr.write("scored %d predictions in %.3f s\n" % (n, time.perf_counter() - t0))


if __name__ == "__main__":
    main()
