#!/usr/bin/env bash
# make_fixtures.sh — regenerate the engine's committed test fixtures.
#
#   tools/make_fixtures.sh [REFERENCE_DIR]   (default tests/tools/reference)
#
# Writes tests/data/models/<name>/: a tiny random Hugging Face model folder from
# make_tiny_qwen3.py, plus the reference outputs of qwen3_ref.py (PyTorch, f32):
#   ref_ids.txt      the prompt ids (one line, comma-separated)
#   ref_gen.txt      64 greedy tokens after the prompt (--ignore-eos)
#   ref_logits.npy   float32 [P + 63, vocab]: logits of every position of
#                    prompt + the first 63 generated tokens, i.e. what
#                    `kvbench generate --dump-logits` must reproduce.
#   ref_chat.txt     (qwen3-bf16) a --chat --no-think prompt's ids and 16 tokens
# Needs /usr/bin/python3 with python3-torch and python3-numpy. The project's
# tests read only the committed files, never Python.
set -euo pipefail
cd "$(dirname "$0")/.."
REF=$(realpath "${1:-tests/tools/reference}")
OUT=tests/data/models
PY=/usr/bin/python3
rm -rf "$OUT"
mkdir -p "$OUT"

# make NAME ARCH DTYPE [generator options] [-- python edits of the config]
# The generator names folders tiny-ARCH-DTYPE; we rename to NAME.
gen() {
  local name=$1 arch=$2 dtype=$3; shift 3
  local tmp; tmp=$(mktemp -d)
  $PY "$REF/make_tiny_qwen3.py" --preset tiny --arch "$arch" --dtypes "$dtype" --out "$tmp" "$@" >/dev/null
  mv "$tmp/tiny-$arch-$dtype" "$OUT/$name"
  rmdir "$tmp"
}

# untied NAME ARCH DTYPE: like gen, with a separate lm_head (the preset ties them).
untied() {
  local name=$1 arch=$2 dtype=$3; shift 3
  local tmp; tmp=$(mktemp -d)
  $PY - "$REF" "$arch" "$dtype" "$tmp" "$@" <<'PYEOF' >/dev/null
import sys
sys.path.insert(0, sys.argv[1])
import make_tiny_qwen3 as m
m.PRESETS["tiny"]["tie_word_embeddings"] = False
sys.argv = ["make_tiny_qwen3.py", "--preset", "tiny", "--arch", sys.argv[2], "--dtypes", sys.argv[3],
            "--out", sys.argv[4]] + sys.argv[5:]
m.main()
PYEOF
  mv "$tmp/tiny-$arch-$dtype" "$OUT/$name"
  rmdir "$tmp"
}

# edit NAME PYTHON: rewrite NAME/config.json; the code sees the dict as `c`.
edit() {
  $PY - "$OUT/$1/config.json" "$2" <<'PYEOF'
import json, sys
path, code = sys.argv[1], sys.argv[2]
c = json.load(open(path))
exec(code)
json.dump(c, open(path, "w"), indent=2, sort_keys=True)
PYEOF
}

gen qwen3-f32 qwen3 f32
gen qwen3-bf16 qwen3 bf16
gen qwen3-f16 qwen3 f16
gen qwen3-bf16-sharded qwen3 bf16 --shard-mb 0.05
# newer transformers nest rope settings under rope_parameters
edit qwen3-bf16-sharded 'c["rope_parameters"] = {"rope_theta": c.pop("rope_theta"), "rope_type": "default"}'
gen qwen2-bf16 qwen2 bf16
# head_dim absent from config.json: hidden / heads (64 / 4 = 16)
gen qwen2-f32-hd16 qwen2 f32 --head-dim 16
edit qwen2-f32-hd16 'del c["head_dim"]'
untied llama-bf16-llama3 llama bf16
edit llama-bf16-llama3 'c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}'
gen llama-f32 llama f32

# One prompt for all models: 40 ids spread over the vocab, fixed.
IDS=$($PY -c 'print(",".join(str((i * 97 + 13) % 503) for i in range(40)))')
for d in "$OUT"/*/; do
  d=${d%/}
  echo "$IDS" > "$d/ref_ids.txt"
  gen_ids=$($PY "$REF/qwen3_ref.py" "$d" --ids "$IDS" --generate 64 --ignore-eos --threads 1 2>/dev/null \
            | sed -n 's/^generated: //p')
  echo "$gen_ids" > "$d/ref_gen.txt"
  all=$($PY -c 'import sys; a=sys.argv[1].split(","); b=sys.argv[2].split(","); print(",".join(a + b[:-1]))' "$IDS" "$gen_ids")
  $PY "$REF/qwen3_ref.py" "$d" --ids "$all" --dump "$d/ref_logits.npy" --threads 1 >/dev/null 2>&1
  # Greedy equality is only a fair test if no step is a near-tie.
  $PY - "$d" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
x = np.load(d + "/ref_logits.npy")
p = len(open(d + "/ref_ids.txt").read().split(","))
s = np.sort(x[p - 1:], axis=1)
gap = (s[:, -1] - s[:, -2]).min()
print(f"{d}: logits {x.shape}, smallest top-2 gap along the greedy path {gap:.2e}")
if gap < 1e-3:
    sys.exit(f"{d}: near-tie in greedy decoding; pick another prompt")
PYEOF
done
# A chat prompt through the toy tokenizer and template: prompt ids and 16
# greedy tokens (ref_chat.txt: the reference's "ids:" and "generated:" lines).
$PY "$REF/qwen3_ref.py" "$OUT/qwen3-bf16" --prompt "What is the capital of France?" --chat --no-think \
    --generate 16 --ignore-eos --threads 1 2>/dev/null | grep -E '^(ids|generated):' > "$OUT/qwen3-bf16/ref_chat.txt"
du -sh "$OUT"/*
