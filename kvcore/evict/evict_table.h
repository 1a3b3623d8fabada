/* The eviction parameter table: one row per parameter, the only place a
 * parameter is described. Everything else is generated from it:
 *   - defaults, the parser (config keys and CLI spellings) and the type,
 *     range, choice and algorithm checks of what a user wrote
 *     (kvcore/evict/evict_params.c),
 *   - config names and the canonical hash (harness/matrix/config_id.c),
 *   - the `kvbench generate` flags and their --help (harness/cli/eviction.h),
 *   - the "eviction" properties of configs/schema.json (`kvbench schema`).
 * Adding a parameter: a field in kv_evict_params (evict.h) and one row here.
 *
 * X(key, type, default, min, max, choices, only_for, flag, metavar, help, token, abbrev)
 *   key      config key and kv_evict_params field
 *   type     INT | NAME | BOOL | WINDOW (an int or none) | SEED (0..UINT32_MAX) |
 *            NUMBER (a finite double; min and max unused)
 *   default  as text, as a user would type it
 *   min, max accepted integers (INT, WINDOW, SEED)
 *   choices  accepted names, NULL-terminated (NAME); NULL: the scorer registry
 *   only_for the one algorithm it applies to; NULL: every algorithm
 *   flag     CLI flag without the dashes; metavar and help for --help
 *   token    config names: prefix of the value ("s" -> "s32"); NULL: not shown
 *   abbrev   "value=token ..." shorter tokens for some values ("=": omitted)
 */
#ifndef KV_EVICT_TABLE_H
#define KV_EVICT_TABLE_H

#define KV_NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* clang-format off */
#define KV_EVICT_PARAM_TABLE(X) \
    X(algorithm, NAME, "snapkv", 0, 0, NULL, NULL, \
      "eviction", "ALGO", "evict KV-cache tokens with ALGO: snapkv, h2o, streaming, random, knorm, tova, keydiff, " \
      "expected_attention", \
      "", "") \
    X(strategy, NAME, "per_token", 0, 0, KV_NAMES("per_token", "per_group", "per_head"), NULL, \
      "strategy", "NAME", "eviction granularity: per_token, per_group or per_head", \
      "", "per_token= per_group=pg per_head=ph") \
    X(group_size, INT, "32", 1, INT_MAX, NULL, NULL, \
      "group-size", "N", "tokens per group with per_group", "g", "") \
    X(start_size, INT, "32", 0, INT_MAX, NULL, NULL, \
      "start-size", "N", "first tokens always kept", "s", "") \
    X(recent_size, INT, "128", 0, INT_MAX, NULL, NULL, \
      "recent-size", "N", "newest tokens always kept", "r", "") \
    X(intermediate_size, INT, "512", 0, INT_MAX, NULL, NULL, \
      "intermediate-size", "N", "best-scored tokens kept between them", "i", "") \
    X(refined_algorithm, NAME, "kvcrush", 0, 0, KV_NAMES("kvcrush", "criticalkv"), NULL, \
      "refined-algorithm", "NAME", "the refiner: kvcrush or criticalkv", "", "") \
    X(refined_size, INT, "0", 0, INT_MAX, NULL, NULL, \
      "refined-size", "N", "of the intermediate tokens, how many the refiner picks", "ref", "") \
    X(kvcrush_anchor, NAME, "alternate", 0, 0, \
      KV_NAMES("random", "zeros", "ones", "mean", "alternate"), NULL, \
      "kvcrush-anchor", "NAME", "KVCrush anchor: alternate, random, zeros, ones, mean", \
      "anchor-", "") \
    X(window_size, WINDOW, "none", 1, INT_MAX, NULL, "snapkv", \
      "window-size", "N", "SnapKV observation window (none: 8)", "w", "") \
    X(score_aggregation, NAME, "sum", 0, 0, KV_NAMES("sum", "norm_sum"), NULL, \
      "score-aggregation", "NAME", "sum or norm_sum", "", "norm_sum=normsum") \
    X(apply_rerotation, BOOL, "true", 0, 0, NULL, NULL, \
      "apply-rerotation", "BOOL", "rotate kept keys to their new slots", "", "true= false=norot") \
    X(positions, NAME, "absolute", 0, 0, KV_NAMES("absolute", "compact"), NULL, \
      "positions", "NAME", "absolute or compact (kvpress)", "", "absolute=") \
    X(seed, SEED, "0", 0, UINT32_MAX, NULL, NULL, \
      "eviction-seed", "N", "seed of the random policy and anchor", "seed", "") \
    X(ea_n_future_positions, INT, "512", 1, INT_MAX, NULL, "expected_attention", \
      "ea-n-future-positions", "N", "future query positions ExpectedAttention averages RoPE over", \
      "nf", "") \
    X(ea_use_covariance, BOOL, "true", 0, 0, NULL, "expected_attention", \
      "ea-use-covariance", "BOOL", "ExpectedAttention's query covariance term", "", \
      "true= false=nocov") \
    X(ea_use_vnorm, BOOL, "true", 0, 0, NULL, "expected_attention", \
      "ea-use-vnorm", "BOOL", "ExpectedAttention scores times the value norm", "", \
      "true= false=novnorm") \
    X(ea_epsilon, NUMBER, "0", 0, 0, NULL, "expected_attention", \
      "ea-epsilon", "X", "added to ExpectedAttention's score before the value norm", "eps", "") \
    X(layer_budget, NAME, "uniform", 0, 0, KV_NAMES("uniform", "pyramid"), NULL, \
      "layer-budget", "NAME", "uniform, or pyramid (PyramidKV: more intermediate tokens in lower layers)", \
      "", "uniform= pyramid=pyr") \
    X(pyramid_beta, NUMBER, "20", 0, 0, NULL, NULL, \
      "pyramid-beta", "X", "pyramid: the last layer keeps 1/beta of the mean (>= 1)", "beta", "") \
    X(head_budget, NAME, "uniform", 0, 0, KV_NAMES("uniform", "adaptive"), NULL, \
      "head-budget", "NAME", "uniform, or adaptive (AdaKV: a layer's KV heads share their budget; per_head)", \
      "", "uniform= adaptive=ada") \
    X(alpha_safeguard, NUMBER, "0.2", 0, 0, NULL, NULL, \
      "alpha-safeguard", "X", "adaptive: the share of its budget every head keeps (0..1)", "alpha", "") \
    X(kv_cache_precision, NAME, "f32", 0, 0, KV_NAMES("f32", "bf16", "f16", "u8", "u4"), NULL, \
      "kv-cache-precision", "NAME", "the KV cache's precision: f32, bf16, f16, u8 or u4 (OpenVINO's)", \
      "", "f32= bf16=kvbf16 f16=kvf16 u8=kvu8 u4=kvu4") \
    X(key_quant, NAME, "by_token", 0, 0, KV_NAMES("by_token", "by_channel"), NULL, \
      "key-quant", "NAME", "u8/u4 key groups: by_token or by_channel (KIVI)", "", \
      "by_token= by_channel=kch") \
    X(value_quant, NAME, "by_token", 0, 0, KV_NAMES("by_token"), NULL, \
      "value-quant", "NAME", "u8/u4 value groups: by_token", "", "by_token=") \
    X(key_group_size, INT, "0", 0, 512, NULL, NULL, \
      "key-group-size", "N", "u8/u4 key group: channels by token, tokens by channel (0: head_dim / 32)", \
      "kg", "") \
    X(value_group_size, INT, "0", 0, 512, NULL, NULL, \
      "value-group-size", "N", "u8/u4 value group: channels (0: head_dim)", "vg", "") \
    X(compression_ratio, NUMBER, "0", 0, 0, NULL, NULL, \
      "compression-ratio", "R", "kvpress: evict this share of each prompt (0..1; 0: the sizes set the budget)", \
      "cr", "") \
    X(query_aware, BOOL, "true", 0, 0, NULL, NULL, \
      "query-aware", "BOOL", "compress the prompt with its question (true), or the context alone " \
      "before the question is read (false: kvpress's protocol)", "", "true= false=qa0")
/* clang-format on */

#endif
