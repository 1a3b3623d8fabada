#!/usr/bin/python3
"""Train kvbench's demo retrieval model (Qwen3 architecture, 0.43M parameters, byte tokens) on CPU.

Recipe (issue 10): 10x learning rate on every RMSNorm weight (q_norm/k_norm included); ~30% plain
induction sequences (random segments repeated later, loss on the repeat) mixed into the retrieval
prompts of tools/synth; a warm-up of induction only; a length curriculum from 128 tokens up to
2,048. Every --eval-every steps it measures exact-match accuracy per task and context length on a
held-out set (its own seed), logs it, and checkpoints (last and best). The schedule depends only
on the step, and every batch is drawn from an RNG seeded by (seed, step), so a rerun sees the
same data. Its weights are not bit-identical, though: a rerun of the shipped chain matched the
original's log through the induction warm-up and drifted apart once retrieval training began
(README, "Reproduce").

That recipe alone is not what trains the shipped weights. They also need fixed-offset heads in
layer 0 (--init-offset-heads --freeze-offset-heads), Llama 3 RoPE scaling so that layer 1 has
dimensions that do not rotate over 2,048 tokens (--rope-llama3), and simulated eviction
(--scramble-terminator, --evict-sim, --evict-needle). The README section "Trained demo model"
gives the exact commands and what each change did.

  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train/train.py --steps 3000
  tools/train/export.py --ckpt tools/train/runs/main/best.pt --out models/kvbench-retrieval
"""
import argparse
import collections
import os
import random
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "synth"))
import synth  # noqa: E402
from model import EOS_ID, Config, Qwen3Tiny, encode  # noqa: E402

TASKS = list(synth.TEMPLATES)
TASK_WEIGHTS = [0.3, 0.4, 0.3]          # key-value is the hardest of the three
EVAL_LENGTHS = [512, 1024, 2048]


# Layer 1's hidden keys left to SnapKV itself, chosen once the batch's attention is known.
SnapKVPick = collections.namedtuple("SnapKVPick", "window budget")

TERMINATOR_NOISE = "abcdefghijklmnopqrstuvwxyz ,;!?-"


def scramble_terminator(rng, task, context, question, answers):
    """The character right after the answer in the context, replaced by a random non-digit: the
    model must then end its answer by itself (5 digits for a pass key, 4 for a value) instead of
    copying the '.' or newline that follows it, which an evicted cache may no longer hold."""
    if task not in ("synth_passkey", "synth_kv"):
        return context
    at = needle_at(task, context, question, answers)
    end = at + len(answers[0])
    if at <= 0 or end >= len(context):
        return context
    return context[:end] + rng.choice(TERMINATOR_NOISE) + context[end + 1:]


def needle_at(task, context, question, answers):
    """Index in the context of the asked answer's own occurrence, or -1."""
    if task == "synth_passkey":
        return context.find(answers[0])
    tail, ans = question.split("\n")[-1], answers[0].split()[-1]   # "abc:" / "... jatoda ["
    at = context.find(tail + ans)
    return at + len(tail) if at >= 0 else -1


def evicted_context(rng, task, context, question, answers, n_prompt, needle_hide=0.0):
    """Key positions hidden from the answer's tokens, as an evicted cache would hide them: a random
    50-95% of the context outside the first 4 tokens, the last 32 and the needle's neighbourhood.
    The first answer token comes from the full prefill (row n_prompt - 1), so only the rows of
    the answer's later tokens lose them: the model learns to retrieve whatever else survives.
    needle_hide also hides each position of the answer and the 4 after it with that probability:
    a head can read a digit at its own position or a few positions later (the layer-0 offsets
    carry it along), and SnapKV keeps only a few positions past the one the question attended,
    so the model is pushed to read each digit through more than one such shift."""
    at = needle_at(task, context, question, answers)
    if at < 0:
        return []
    start = len(synth.TEMPLATES[task].split("{context}")[0]) + at   # bytes = tokens
    keep_lo, keep_hi = start - 24, start + len(answers[0]) + 4
    share = rng.uniform(0.5, 0.95)
    return [t for t in range(4, n_prompt - 32)
            if (rng.random() < share if not keep_lo <= t < keep_hi else
                needle_hide > 0 and t >= start and rng.random() < needle_hide)]


def retrieval_example(rng, task, length, vocab, depth_range=(0.0, 1.0), filler="mixed", extra=0, ctx_w=0.0,
                      scramble=0.0, evict=0.0, needle_hide=0.0, policy_share=0.0):
    """(ids, loss mask, hidden): the prompt, then the answer and <|endoftext|>, loss on those only.
    With extra > 0, up to that many further questions on the same context follow, each with its
    answer (more retrieval signal per long context; evaluation asks only the first). With
    probability `evict`, hidden = (first row, end row, key positions) that layer 1 hides from the
    first answer's later tokens (evicted_context), or, with probability policy_share, (first row,
    end row, SnapKVPick(window, budget)): SnapKV's own choice, made in training from the model's
    attention at that step (policy_hide); else None."""
    depth = rng.uniform(*depth_range)
    context, question, answers, more = synth.make_sample(task, rng, length, depth, vocab, filler, max(extra, 1))
    more = more[:extra]
    if scramble and rng.random() < scramble:
        context = scramble_terminator(rng, task, context, question, answers)
    prompt = encode(synth.TEMPLATES[task].format(context=context, input=question))
    ids, mask = list(prompt), [ctx_w] * len(prompt)
    for q, ans in [(None, answers)] + more:
        if q is not None:
            qi = encode("\n\n" + q)
            ids += qi
            mask += [ctx_w] * len(qi)
        target = encode(ans[0].split()[-1]) + [EOS_ID]     # "Paragraph 7" is answered by "7"
        ids += target
        mask += [1] * len(target)
    hidden = None
    if evict and rng.random() < evict:
        n = len(prompt)
        end = n + len(encode(answers[0].split()[-1])) + 1
        if policy_share and rng.random() < policy_share:
            hidden = (n, end, SnapKVPick(rng.choice((8, 32)), rng.choice((128, 256))))
        else:
            hidden = (n, end, evicted_context(rng, task, context, question, answers, n, needle_hide))
    return ids, mask, hidden


def induction_example(rng, length, whole_repeat=0.5):
    """Random printable bytes with segments copied to later positions; loss on each copy
    (except its first token, which nothing predicts). With probability whole_repeat the sequence
    is instead a random block followed by its repeat (the densest copying signal)."""
    if rng.random() < whole_repeat:
        # prefix, block, gap, block: random offsets, so that no fixed-distance shortcut copies
        n = rng.randint(length // 6, length * 2 // 5)
        gap = rng.randint(0, length - 2 * n)
        pre = length - 2 * n - gap
        ids = [rng.randint(32, 126) for _ in range(length)]
        ids[pre + n + gap:pre + 2 * n + gap] = ids[pre:pre + n]
        mask = [0] * length
        mask[pre + n + gap + 1:pre + 2 * n + gap] = [1] * (n - 1)
        return ids, mask
    ids = [rng.randint(32, 126) for _ in range(length)]
    mask = [0] * length
    for _ in range(max(1, length // 96)):
        n = rng.randint(6, 32)
        if length < 3 * n:
            break
        src = rng.randint(0, length - 2 * n - 1)
        dst = rng.randint(src + n, length - n)
        ids[dst:dst + n] = ids[src:src + n]
        mask[dst + 1:dst + n] = [1] * (n - 1)
        mask[dst] = 0
    return ids, mask


def schedule(step, a, mix_start):
    """(max length, share of induction) at a step: induction-only warm-up until step mix_start
    (None: still warming up), then the length ramp."""
    if mix_start is None or step < mix_start:
        return a.warmup_len, 1.0
    ramp = min(1.0, (step - mix_start) / max(1, a.ramp_steps))
    return int(256 + ramp * (a.max_len - 256)), a.induction_share


def make_batch(step, a, vocab, mix_start):
    rng = random.Random(a.seed * 1_000_003 + step)
    max_len, ind_share = schedule(step, a, mix_start)
    if ind_share == 1.0:                 # warm-up: short sequences, the copying signal is strongest
        length = rng.randint(max_len // 2, max_len)
    else:
        length = max(128, int(max_len * rng.uniform(0.25, 1.0)) if rng.random() < 0.6 else max_len)
    rows, longest = [], 0
    while len(rows) < 2 or (len(rows) + 1) * longest <= a.batch_tokens:
        if rng.random() < ind_share:
            rows.append(induction_example(rng, length, a.whole_repeat))
        else:
            task = rng.choices(TASKS, TASK_WEIGHTS)[0]
            rows.append(retrieval_example(rng, task, length, vocab, extra=rng.randint(0, a.extra_questions),
                                          ctx_w=a.context_loss, scramble=a.scramble_terminator,
                                          evict=a.evict_sim, needle_hide=a.evict_needle,
                                          policy_share=a.evict_policy))
        longest = max(longest, len(rows[-1][0]))
    return pad(rows), length, policy_rows(rows)


def pad(rows):
    """ids [B, T], loss mask [B, T], and the additive attention mask [B, 1, T, T] of layers >= 1
    hiding evicted keys from answer rows (None when no row hides any)."""
    T = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), T), EOS_ID, dtype=torch.long)
    mask = torch.zeros((len(rows), T))
    hide = None
    for i, (r, m, *h) in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.float)
        if h and h[0] and not isinstance(h[0][2], SnapKVPick) and h[0][2]:
            if hide is None:
                hide = torch.zeros((len(rows), 1, T, T))
            r0, r1, cols = h[0]
            hide[i, 0, r0:r1, torch.tensor(cols)] = float("-inf")
    return ids, mask, hide


def policy_rows(rows):
    """(row, first row, end row, window, budget) of the rows whose eviction SnapKV decides."""
    return [(i, h[0][0], h[0][1], h[0][2].window, h[0][2].budget) for i, (_, _, *h) in enumerate(rows)
            if h and h[0] and isinstance(h[0][2], SnapKVPick)]


@torch.no_grad()
def policy_hide(model, ids, pending, hide):
    """Add to `hide` what SnapKV would evict from layer 1 for each pending row, judged by the
    model's own attention now: the last `window` prompt rows' weights summed per head, max-pooled
    over 7 positions, summed over heads; the first 4 and last 32 prompt positions always stay,
    and the best budget - 36 others. The needle survives only where the model's attention at
    the question keeps it, as in a real SnapKV cache."""
    B, T = ids.shape
    probs = model(ids[:, :-1], attention_of=1)
    if hide is None:
        hide = torch.zeros((B, 1, T, T))
    for i, r0, r1, window, budget in pending:
        n = r0
        s = probs[i, :, n - window:n, :n].sum(1)
        s = F.max_pool1d(s[:, None, :], 7, stride=1, padding=3)[:, 0].sum(0)
        mid, keep = s[4:n - 32], budget - 36
        if mid.numel() > keep:
            drop = mid.topk(mid.numel() - keep, largest=False).indices + 4
            hide[i, 0, r0:r1, drop] = float("-inf")
    return hide


def loss_fn(model, ids, mask, hide=None):
    logits = model(ids[:, :-1], None if hide is None else hide[:, :, :-1, :-1])
    tgt, m = ids[:, 1:], mask[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    return (nll * m.reshape(-1)).sum() / m.sum().clamp(min=1)


def make_valset(seed, per_cell):
    rng = random.Random(seed)
    vocab = synth.pseudo_words(rng, 1500)
    val = {}
    for task in TASKS:
        for L in EVAL_LENGTHS:
            val[(task, L)] = [retrieval_example(rng, task, L, vocab, (0.1, 0.8), "classic")
                              for _ in range(per_cell)]
    ind = [induction_example(rng, 256, 0.5) for _ in range(8)]
    return val, ind


@torch.no_grad()
def copy_accuracy(model, rows):
    """Share of copied tokens that greedy prediction gets right on held-out induction sequences."""
    ids, mask, _ = pad(rows)
    pred = model(ids[:, :-1]).argmax(-1)
    m = mask[:, 1:]
    return float(((pred == ids[:, 1:]).float() * m).sum() / m.sum())


@torch.no_grad()
def evaluate(model, val):
    """Exact match under teacher forcing (= greedy decoding gets every answer token right)."""
    model.eval()
    acc = {}
    for key, rows in val.items():
        ok = 0
        for i in range(0, len(rows), 4):
            ids, mask, _ = pad(rows[i:i + 4])
            pred = model(ids[:, :-1]).argmax(-1)
            m = mask[:, 1:] == 1
            ok += int(((pred == ids[:, 1:]) | ~m).all(dim=1).sum())
        acc[key] = ok / len(rows)
    model.train()
    return acc


def fmt_acc(acc):
    parts = []
    for task in TASKS:
        cells = " ".join(f"{L}:{100 * acc[(task, L)]:3.0f}" for L in EVAL_LENGTHS)
        parts.append(f"{task.replace('synth_', '')} {cells}")
    return " | ".join(parts)


def next_utc(hhmm, now):
    """The first time at or after `now` whose UTC clock reads HH:MM (a deadline may lie past midnight)."""
    h, m = (int(x) for x in hhmm.split(":"))
    day = now - now % 86400
    t = day + 3600 * h + 60 * m
    return t if t > now else t + 86400


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100000, help="stop after this step")
    ap.add_argument("--deadline", help="also stop at this UTC time, HH:MM (for a time-boxed session)")
    ap.add_argument("--run", default=os.path.join(HERE, "runs", "main"), help="checkpoint and log folder")
    ap.add_argument("--log", help="log file (default RUN/training_log.txt)")
    ap.add_argument("--resume", action="store_true", help="continue from RUN/last.pt")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--val-seed", type=int, default=777)
    ap.add_argument("--val-per-cell", type=int, default=12)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--norm-lr-mult", type=float, default=10.0)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--warmup-steps", type=int, default=3000, help="at most this many induction-only steps")
    ap.add_argument("--warmup-until", type=float, default=0.6,
                    help="end the warm-up at the first check where held-out copy accuracy reaches this")
    ap.add_argument("--warmup-len", type=int, default=256, help="longest warm-up sequence")
    ap.add_argument("--heads", type=int, default=4, help="query heads per layer")
    ap.add_argument("--kv-heads", type=int, default=2, help="key/value heads per layer")
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--init-offset-heads", action="store_true",
                    help="initialise layer 0's query heads to attend 1, 2, ... tokens back (see model.py)")
    ap.add_argument("--freeze-offset-heads", action="store_true",
                    help="and keep those attention patterns fixed while training")
    ap.add_argument("--offset-pairs", type=int, default=6, help="RoPE pairs the offset heads use (the fastest)")
    ap.add_argument("--offset-gain", type=float, default=5.0, help="q_norm/k_norm weight on those pairs")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rope-llama3", metavar="FACTOR,LOW,HIGH,ORIGINAL_MAX",
                    help="Llama 3 RoPE scaling: stretch the slow pairs by FACTOR, so that layer 1 has "
                         "dimensions that match content at any distance while layer 0 keeps the fast "
                         "pairs for its offset heads")
    ap.add_argument("--ramp-steps", type=int, default=1500, help="steps to ramp max length to --max-len")
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--induction-share", type=float, default=0.3)
    ap.add_argument("--extra-questions", type=int, default=4, help="max further questions per context")
    ap.add_argument("--context-loss", type=float, default=0.0,
                    help="loss weight on the prompt tokens of retrieval examples (language modelling)")
    ap.add_argument("--whole-repeat", type=float, default=0.5,
                    help="share of induction sequences that are one random block repeated")
    ap.add_argument("--scramble-terminator", type=float, default=0.0,
                    help="share of passkey/kv examples whose answer is not followed by its usual '.' or newline")
    ap.add_argument("--evict-sim", type=float, default=0.0,
                    help="share of retrieval examples whose answer tokens see an evicted context (layer 1)")
    ap.add_argument("--evict-needle", type=float, default=0.0,
                    help="with --evict-sim: also hide each position of the answer and the 4 after it "
                         "with this probability (see evicted_context)")
    ap.add_argument("--evict-policy", type=float, default=0.0,
                    help="share of --evict-sim examples whose hidden keys SnapKV chooses from the "
                         "model's own attention (window 8 or 32, budget 128 or 256; see policy_hide)")
    ap.add_argument("--eval-every", type=int, default=100)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    os.makedirs(a.run, exist_ok=True)
    log_path = a.log or os.path.join(a.run, "training_log.txt")

    scaling = None
    if a.rope_llama3:
        factor, low, high, orig = (float(x) for x in a.rope_llama3.split(","))
        scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                   "high_freq_factor": high, "original_max_position_embeddings": int(orig)}
    cfg = Config(heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, rope_theta=a.rope_theta,
                 rope_scaling=scaling)
    model = Qwen3Tiny(cfg)
    if a.init_offset_heads:
        model.init_offset_heads(tuple(range(1, cfg.heads + 1)), pairs=a.offset_pairs, gain=a.offset_gain)
    if a.freeze_offset_heads:
        model.freeze_offset_heads()
    opt = torch.optim.AdamW(model.param_groups(a.lr, a.norm_lr_mult, a.weight_decay), betas=(0.9, 0.95))
    step, best, mix_start = 0, -1.0, None
    if a.resume and os.path.exists(os.path.join(a.run, "last.pt")):
        ck = torch.load(os.path.join(a.run, "last.pt"))
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, best, mix_start = ck["step"], ck["best"], ck["mix_start"]
        for g, fresh in zip(opt.param_groups, model.param_groups(a.lr, a.norm_lr_mult, a.weight_decay)):
            g["base_lr"] = fresh["base_lr"]  # a resumed run may anneal: --lr of this command
    vocab = synth.pseudo_words(random.Random(a.seed), 1500)
    val, val_ind = make_valset(a.val_seed, a.val_per_cell)

    def log(line):
        with open(log_path, "a") as f:
            f.write(line + "\n")
        print(line, flush=True)

    log(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC start step={step} args={vars(a)}")
    t0, losses = time.time(), []
    deadline = next_utc(a.deadline, t0) if a.deadline else None
    while step < a.steps:
        if deadline and time.time() >= deadline:
            log(f"# deadline {a.deadline} reached at step {step}")
            break
        for g in opt.param_groups:                    # short linear warm-up of the learning rate
            g["lr"] = g["base_lr"] * min(1.0, (step + 1) / 100)
        (ids, mask, hide), length, pending = make_batch(step, a, vocab, mix_start)
        if pending:
            hide = policy_hide(model, ids, pending, hide)
        loss = loss_fn(model, ids, mask, hide)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        losses.append(float(loss))
        if step % a.eval_every == 0:
            ind_len, _ = schedule(step, a, mix_start)
            copy = copy_accuracy(model, val_ind)
            if mix_start is None:                # retrieval is not trained yet: only the copy check
                log(f"step {step:5d} min {(time.time() - t0) / 60:5.1f} maxlen {ind_len:4d} "
                    f"loss {sum(losses) / len(losses):.3f} | copy {100 * copy:3.0f}")
                losses = []
                if copy >= a.warmup_until or step >= a.warmup_steps:
                    mix_start = step
                    log(f"# warm-up ends at step {step}: retrieval mix and length ramp start")
                continue
            acc = evaluate(model, val)
            score = sum(acc.values()) / len(acc)
            log(f"step {step:5d} min {(time.time() - t0) / 60:5.1f} maxlen {ind_len:4d} "
                f"loss {sum(losses) / len(losses):.3f} | {fmt_acc(acc)} | copy {100 * copy:3.0f} | "
                f"mean {100 * score:5.1f}")
            losses = []
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "mix_start": mix_start,
                     "best": max(best, score), "acc": acc, "config": cfg.shape()}
            torch.save(state, os.path.join(a.run, "last.pt.tmp"))
            os.replace(os.path.join(a.run, "last.pt.tmp"), os.path.join(a.run, "last.pt"))
            if score >= best:
                best = score
                torch.save({"model": model.state_dict(), "step": step, "acc": acc, "score": score,
                            "config": cfg.shape()},
                           os.path.join(a.run, "best.pt"))
                log(f"# best so far: step {step} mean {100 * score:.1f}")
    log(f"# end step {step} best mean {100 * best:.1f}")


if __name__ == "__main__":
    main()
