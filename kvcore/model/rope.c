#include "model/rope.h"

#include <math.h>
#include <stdlib.h>

/* Llama 3: low frequencies (long wavelengths) are divided by factor, high
 * ones kept, and the band between blended. Float arithmetic in the order
 * of the reference, so positions agree to the last bit where possible. */
static float llama3_scale(float inv, const kv_rope_config *c)
{
    const float pi2 = (float)(2.0 * M_PI);
    float factor = (float)c->factor, lo = (float)c->low_freq_factor;
    float hi = (float)c->high_freq_factor, old = (float)c->original_max_pos;
    float wavelen = pi2 / inv;
    float scaled = wavelen > old / lo ? inv / factor : inv;
    if (wavelen < old / hi || wavelen > old / lo)
        return scaled;
    float smooth = (old / wavelen - lo) / (hi - lo);
    return (1 - smooth) * scaled / factor + smooth * scaled;
}

int kv_rope_init(kv_rope *r, const kv_rope_config *cfg, int head_dim, kv_error *err)
{
    r->head_dim = head_dim;
    r->inv_freq = malloc((size_t)(head_dim / 2) * sizeof *r->inv_freq);
    if (!r->inv_freq)
        return kv_fail(err, "out of memory");
    for (int i = 0; i < head_dim / 2; i++) {
        float e = (float)(2 * i) / (float)head_dim;
        float inv = 1.0f / powf((float)cfg->theta, e);
        r->inv_freq[i] = cfg->llama3 ? llama3_scale(inv, cfg) : inv;
    }
    return 0;
}

void kv_rope_free(kv_rope *r)
{
    free(r->inv_freq);
    r->inv_freq = NULL;
}

void kv_rope_apply(const kv_rope *r, float *x, int n_heads, int32_t pos)
{
    int half = r->head_dim / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * r->inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * (size_t)r->head_dim;
            float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = b * c + a * s;
        }
    }
}
