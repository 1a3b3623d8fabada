#!/usr/bin/env python3
"""kvbench against llama.cpp's llama-bench on the same weights, interleaved.

    tests/bench/peer.py --llama-bench BIN --gguf MODEL.gguf --model MODEL_DIR
                        [--kvbench build/harness/kvbench] [--threads 2]
                        [--prompts 512,2048,8192] [--decode-after 512,8192]
                        [--gen 64] [--rounds 2] [--cache bf16] [--log FILE.jsonl]

(--prompts none or --decode-after none leaves those measures out.)

MODEL.gguf is MODEL_DIR written by tests/bench/peer_gguf.py (the same BF16
weights). Every round runs every measure once per engine -- kvbench in f32
mode, kvbench in bf16 mode, llama-bench -- in an order that rotates from
round to round, so that a busy neighbour on a shared machine slows all three
alike and the ratios stay meaningful when the absolute rates do not. Each
round starts with `kvbench bench machine` (FP32/BF16 peak and memory read
bandwidth at the same thread count), so the table's limits come from the
same run. Prints a Markdown table: the mean tok/s per engine over the rounds
and the ratio of kvbench to llama.cpp per mode (the mean of the per-round
ratios), then the machine figures and the load before and after.

Beside each ratio, the share of the machine's measured limit that kvbench's
mode reaches (the mean of its rounds' rates against the mean of the rounds'
limits): prefill against the FP32 peak (f32 mode) or the BF16 peak (bf16
mode; the FP32 one where the level has none), counting 2 FLOPs per
non-embedding weight per token; decode against the read bandwidth,
counting every weight of the projections and the LM head once per token in
BF16 (the checkpoint's dtype, which decode reads) plus the F32 keys and
values of the cache at its mean depth during the measure.

Prefill P is kvbench's `bench model --prompt-tokens P --gen-tokens 0` and
llama-bench's `-p P -n 0`; decode after D is kvbench's `--prompt-tokens D
--gen-tokens G` (its decode line; when D is also a prefill length, one run
gives both) and llama-bench's `-p 0 -n G -d D` (G tokens generated after a
context of D, the depth filled before the timer starts). llama-bench runs
with `-lm none` (weights read into memory, as kvbench does), `-r 1` and its
own defaults otherwise (F16 KV cache, flash attention auto, and one
unmeasured warmup run of each test); kvbench gets `--repeats 1 --warmup 1`
to match, so neither engine's figure is a cold first run (fresh pages
fault in on the first run: ~37 us each on a VM).

--cache P adds a third kvbench mode: bf16 compute with the KV cache at
precision P (`--kv-cache-precision P`; f32 is the other modes' cache).
llama-bench's cache is F16, so `--cache bf16` (or f16) is the like-for-like
mode, the same bytes per cached token; f32 and bf16 modes keep kvbench's
default F32 cache and so read twice llama.cpp's bytes of cache per decoded
token. Its share of the read bandwidth counts its own cache bytes (the
`kv_bytes_per_token` kvbench reports).

Only the Python standard library is needed.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

MODES = ("f32", "bf16")  # compute modes, each on kvbench's default F32 cache


def fail(msg):
    sys.exit(f"peer: {msg}")


def int_list(s):
    if s == "none":
        return []
    try:
        values = [int(v) for v in s.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated numbers, not {s!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"want comma-separated positive numbers, not {s!r}")
    return values


def run(cmd, log):
    """Runs cmd; its stdout's JSON lines. Logs the command and the lines."""
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if log:
        log.write(json.dumps({"cmd": cmd, "seconds": round(time.time() - t0, 1), "out": lines}) + "\n")
        log.flush()
    return lines


def load():
    """`uptime`'s 1-minute load and /proc/pressure/cpu's "some avg10" (PSI)."""
    la = os.getloadavg()[0]
    try:
        with open("/proc/pressure/cpu") as f:
            psi = f.readline().split()[1].split("=")[1] + " %"
    except OSError:
        psi = "n/a"
    return f"load {la:.1f}, PSI {psi}"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def model_work(model_dir):
    """Per token: FLOPs of prefill (2 per non-embedding weight), weight bytes
    of decode (BF16: projections and LM head), and F32 K+V bytes per cached token."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or hidden // heads
    per_layer = (2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
                 + 3 * hidden * cfg["intermediate_size"])
    weights = layers * per_layer
    return {"prefill_flops": 2 * weights,
            "decode_weight_bytes": 2 * (weights + cfg["vocab_size"] * hidden),
            "kv_bytes_per_token": layers * kv_heads * head_dim * 2 * 4}


class Peer:
    def __init__(self, a, log):
        self.a, self.log = a, log
        self.work = model_work(a.model)
        self.rates = {}  # (measure, engine) -> [tok/s per round]
        self.cpu_rates = {}  # (measure, engine) -> [tok/cpu-s per round] (kvbench only)
        self.machine = []  # bench machine JSON lines, every round
        self.kv_bytes = {}  # mode -> K+V bytes per cached token, as kvbench reports them
        self.modes = list(MODES) + ([f"bf16+{a.cache}"] if a.cache else [])
        self.llama_settings = None

    def add(self, measure, engine, rate, cpu=None):
        self.rates.setdefault((measure, engine), []).append(rate)
        if cpu is not None:
            self.cpu_rates.setdefault((measure, engine), []).append(cpu)

    def kvbench(self, mode, prompt, gen):
        """mode: a compute mode (MODES), or "bf16+P": bf16 compute on a cache at precision P."""
        a = self.a
        compute, _, cache = mode.partition("+")
        out = run([a.kvbench, "bench", "model", "--model", a.model, "--prompt-tokens", str(prompt),
                   "--gen-tokens", str(gen), "--repeats", "1", "--warmup", "1",
                   "--threads", str(a.threads), "--compute", compute, "--json"]
                  + (["--kv-cache-precision", cache] if cache else []), self.log)
        engine = f"kvbench {mode}"
        for line in out:
            if "kv_bytes_per_token" in line:
                self.kv_bytes[mode] = line["kv_bytes_per_token"]
            if line["measure"] == "prefill" and prompt in a.prompts:
                self.add(f"prefill {prompt}", engine, line["tokens_per_s_median"],
                         line["tokens_per_cpu_s_median"])
            elif line["measure"] == "decode after prompt" and gen:
                self.add(f"decode {gen} after {prompt}", engine, line["tokens_per_s_median"],
                         line["tokens_per_cpu_s_median"])

    def llama(self, args, measure):
        a = self.a
        out = run([a.llama_bench, "-m", a.gguf, "-t", str(a.threads), "-lm", "none", "-r", "1",
                   "-o", "jsonl"] + args, self.log)
        if len(out) != 1:
            fail(f"llama-bench {' '.join(args)}: want one result line, got {len(out)}")
        self.llama_settings = {k: out[0].get(k) for k in ("build_commit", "cpu_info", "type_k",
                                                            "type_v", "flash_attn", "n_ubatch")}
        self.add(measure, "llama.cpp", out[0]["avg_ts"])

    def jobs(self):
        """One round's work: (measure label, engine, thunk) for every engine and length."""
        a = self.a
        lengths = sorted(set(a.prompts) | set(a.decode_after))
        jobs = []
        for n in lengths:
            gen = a.gen if n in a.decode_after else 0
            kv = [(f"kvbench {m}, {n} tokens", (lambda m=m, n=n, gen=gen: self.kvbench(m, n, gen)))
                  for m in self.modes]
            ll = []
            if n in a.prompts:
                ll.append(lambda n=n: self.llama(["-p", str(n), "-n", "0"], f"prefill {n}"))
            if gen:
                ll.append(lambda n=n, gen=gen: self.llama(
                    ["-p", "0", "-n", str(gen), "-d", str(n)], f"decode {gen} after {n}"))
            jobs.append(kv + [(f"llama.cpp, {n} tokens", lambda ll=ll: [f() for f in ll])])
        return jobs

    def measure(self):
        a = self.a
        for r in range(a.rounds):
            self.machine.append(run([a.kvbench, "bench", "machine", "--threads", str(a.threads),
                                     "--json"], self.log))
            for group in self.jobs():
                k = r % len(group)  # rotate the engines' order every round
                for name, job in group[k:] + group[:k]:
                    print(f"# round {r + 1}/{a.rounds}: {name} ({load()})", file=sys.stderr,
                          flush=True)
                    job()

    def measures(self):
        seen = []
        for (m, _) in self.rates:
            if m not in seen:
                seen.append(m)
        return seen

    def table(self):
        def mean(v):
            return sum(v) / len(v)

        def cell(m, e):
            v = self.rates.get((m, e))
            if not v:
                return "–"
            s = f"{mean(v):.1f}"
            c = self.cpu_rates.get((m, e))
            return s + (f" ({mean(c):.1f}/cpu-s)" if c else "")

        def ratio(m, mode):
            kv, ll = self.rates.get((m, f"kvbench {mode}")), self.rates.get((m, "llama.cpp"))
            if not kv or not ll:
                return "–"
            share = self.share(m, mode, mean(kv))
            return f"{mean([x / y for x, y in zip(kv, ll)]):.2f}" + (f" ({share})" if share else "")

        def label(mode):  # "bf16+bf16" reads "bf16, bf16 cache"
            compute, _, cache = mode.partition("+")
            return compute + (f", {cache} cache" if cache else "")

        rows = ["| measure (tok/s, mean of rounds) | "
                + " | ".join(f"kvbench {label(x)}" for x in self.modes) + " | llama.cpp | "
                + " | ".join(f"{label(x)} / llama.cpp" for x in self.modes) + " |",
                "|---|" + "---|" * (2 * len(self.modes) + 1)]
        for m in self.measures():
            rows.append(f"| {m} | " + " | ".join(cell(m, f"kvbench {x}") for x in self.modes)
                        + f" | {cell(m, 'llama.cpp')} | "
                        + " | ".join(ratio(m, x) for x in self.modes) + " |")
        return "\n".join(rows)

    def limit(self, name):
        """The mean over the rounds of bench machine's median for name, or None."""
        v = [l["median"] for lines in self.machine for l in lines
             if l["measure"] == name and l.get("median") is not None]
        return sum(v) / len(v) if v else None

    def share(self, m, mode, rate):
        """'N % of <limit>' that rate tok/s of measure m reaches, or None."""
        words = m.split()
        if words[0] == "prefill":
            name = "bf16" if mode.startswith("bf16") and self.limit("bf16") else "fp32"
            peak = self.limit(name)
            if not peak:
                return None
            used = rate * self.work["prefill_flops"] / 1e9
            return f"{100 * used / peak:.0f} % of {name.upper()} peak"
        gen, depth = int(words[1]), int(words[3])  # "decode G after D"
        read = self.limit("read")
        if not read:
            return None
        kv = self.kv_bytes.get(mode, self.work["kv_bytes_per_token"])
        per_token = self.work["decode_weight_bytes"] + kv * (depth + gen / 2)
        return f"{100 * rate * per_token / 1e9 / read:.0f} % of read bandwidth"

    def machine_summary(self):
        by = {}
        for lines in self.machine:
            for line in lines:
                by.setdefault(line["measure"], []).append(line)
        parts = []
        for name, unit in (("fp32", "GFLOP/s"), ("bf16", "GFLOP/s"), ("read", "GB/s")):
            lines = by.get(name, [])
            if not lines:
                continue
            if lines[0].get("median") is None:
                parts.append(f"{name}: none at {lines[0]['isa']} ({lines[0].get('note', '')})")
                continue
            wall = ", ".join(f"{l['median']:.1f}" for l in lines)
            cpu = ", ".join(f"{l['per_cpu_s_median']:.1f}" for l in lines)
            parts.append(f"{name} ({lines[0]['isa']}): {wall} {unit} per round "
                         f"({cpu} per CPU-second)")
        return "; ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--model", required=True, help="the kvbench model folder the GGUF was written from")
    ap.add_argument("--kvbench", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                       "harness", "kvbench"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int_list, default=[512, 2048, 8192])
    ap.add_argument("--decode-after", type=int_list, default=[512, 8192])
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache", choices=("bf16", "f16", "u8", "u4"),
                    help="add a kvbench mode: bf16 compute on a KV cache at this precision")
    ap.add_argument("--log", help="append every command and its JSON output here")
    a = ap.parse_args()
    for path, what in ((a.llama_bench, "--llama-bench"), (a.kvbench, "--kvbench")):
        if not os.access(path, os.X_OK):
            fail(f"{what}: {path} is not an executable")
    for path, what in ((a.gguf, "--gguf"), (os.path.join(a.model, "config.json"), "--model")):
        if not os.path.isfile(path):
            fail(f"{what}: {path} does not exist")
    if a.rounds < 1 or a.gen < 1 or a.threads < 1:
        fail("--rounds, --gen and --threads must be at least 1")

    version = subprocess.run([a.kvbench, "version", "--libraries"], capture_output=True,
                             text=True).stdout
    level = next((l.split(";")[0] + ")" for l in version.splitlines() if l.startswith("kernels")),
                 "kernels: unknown")
    start, before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load()
    with open(a.log, "a") if a.log else open(os.devnull, "w") as log:
        peer = Peer(a, log)
        peer.measure()
    end, after = time.strftime("%H:%M UTC", time.gmtime()), load()

    print(peer.table())
    print()
    print(f"- {start}–{end}; {cpu_model()}; {a.threads} threads; {a.rounds} rounds, "
          "engines interleaved (order rotated each round)")
    print(f"- kvbench {level}")
    print(f"- llama.cpp: {json.dumps(peer.llama_settings)}")
    print(f"- machine (`kvbench bench machine`, {a.threads} threads): {peer.machine_summary()}")
    print(f"- {before} before, {after} after")


if __name__ == "__main__":
    main()
