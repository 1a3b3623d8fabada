/* The stored-form attention kernels (kernels.h: kv_dot_stored and
 * kv_axpy_stored, or one level's build of them) against the same sums in
 * double over the values their bytes hold: every format, lengths that
 * leave every kind of tail at 8 and 16 values a vector, 1 to 8 query
 * vectors against rows that leave partial tiles; outputs beyond the ones
 * asked for untouched. u8 and u4 also with their groups' parameters
 * applied (kv_dot_stored_groups, set and added; kv_axpy_stored_groups),
 * q . x^ and a x^ over x^ = min + scale code. Shared by tests/unit/model/test_attn_stored.c (the
 * levels this CPU runs) and test_kernels_emulated.c (the AVX-512 build on
 * any CPU). Only the order of the F32 sums differs from the reference, so
 * each result lies within a few F32 roundings of the sum of absolute
 * products. */
#ifndef KB_TEST_STORED_KERNELS_H
#define KB_TEST_STORED_KERNELS_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels.h"

/* The kernels with their groups' parameters e, or without (e NULL). */
typedef void tu_dot_stored_fn(const float *q, size_t q_stride, int nq, const uint8_t *x,
                              size_t x_stride, int nx, kv_precision p, int n,
                              const kv_stored_groups *e, float *out, size_t out_stride);
typedef void tu_axpy_stored_fn(float *y, size_t y_stride, int ny, const float *a,
                               size_t a_stride, const uint8_t *x, size_t x_stride, int nx,
                               kv_precision p, int n, const kv_stored_groups *e);

static inline float frand(void) { return (float)rand() / RAND_MAX * 2.0f - 1.0f; }

/* |got - want| within 1e-5 of the sum of |terms| (F32 roundings of a sum
 * in another order), plus the smallest normal's worth for sums near 0. */
static inline void expect_close(double got, double want, double abs_sum, const char *what, int i, int j)
{
    cr_expect_leq(fabs(got - want), 1e-5 * abs_sum + 1e-30, "%s [%d][%d]: %.9g, want %.9g", what,
                  i, j, got, want);
}

static const kv_precision tu_stored_formats[] = {KV_PREC_U8, KV_PREC_U4, KV_PREC_BF16, KV_PREC_F16};

/* Random stored values of n entries: codes, or 16-bit floats. */
static inline void random_stored(kv_precision p, int n, uint8_t *x, float *values)
{
    for (int j = 0; j < n; j++) {
        float v = frand() * 3.0f;
        uint8_t code = (uint8_t)(rand() % (p == KV_PREC_U4 ? 16 : 256));
        uint16_t h = p == KV_PREC_BF16 ? kv_f32_to_bf16(v) : kv_f32_to_f16(v);
        switch (p) {
        case KV_PREC_U8:
            x[j] = code;
            values[j] = code;
            break;
        case KV_PREC_U4:
            x[j / 2] = (uint8_t)(j % 2 ? (x[j / 2] & 0x0f) | code << 4 : code);
            values[j] = code;
            break;
        default:
            memcpy(x + 2 * j, &h, sizeof h);
            values[j] = p == KV_PREC_BF16 ? kv_bf16_to_f32(h) : kv_f16_to_f32(h);
        }
    }
}

/* A row's parameters for the groups' checks: none for bf16/f16 (x^ = x). */
typedef struct tu_groups {
    kv_stored_groups e; /* NULL-like (g NULL) for bf16/f16 */
    double scale[16], min[16];
} tu_groups;

enum { TU_GROUP_STRIDE = 3 }; /* rows' groups this many apart */

/* e for nx rows (u8/u4), with random scales, mins and query sums. */
static inline void tu_random_groups(kv_precision p, int nx, kv_qgroup *g, float *qsum, bool add,
                                    tu_groups *t)
{
    memset(t, 0, sizeof *t);
    if (p != KV_PREC_U8 && p != KV_PREC_U4)
        return;
    for (int r = 0; r < nx; r++) {
        g[r * TU_GROUP_STRIDE] = (kv_qgroup){.scale = frand() * 0.1f, .min = frand()};
        t->scale[r] = g[r * TU_GROUP_STRIDE].scale;
        t->min[r] = g[r * TU_GROUP_STRIDE].min;
    }
    for (int i = 0; i < 8; i++)
        qsum[i] = frand() * 4.0f;
    t->e = (kv_stored_groups){.g = g, .stride = TU_GROUP_STRIDE, .qsum = qsum, .add = add};
}

/* dot and axpy, named `level` in messages; with groups (u8/u4) when
 * `grouped`, the scores added to what out holds when `add`. */
static inline void tu_check_stored_pass(tu_dot_stored_fn *dot, tu_axpy_stored_fn *axpy,
                                        const char *level, bool grouped, bool add)
{
    srand(21);
    /* rows: AVX2 tiles of two (four query vectors), four and one;
     * AVX-512 tiles of four and eight, then one by one */
    enum { N = 131, Q = 8, ROWS = 11 };
    static const int lengths[] = {1, 6, 8, 14, 16, 17, 31, 38, 64, 80, 128, N};
    float q[Q * N], values[ROWS][N], out[Q * ROWS], out0[Q * ROWS], y[Q * N], y0[Q * N],
        a[Q * ROWS], qsum[Q];
    uint8_t x[ROWS][2 * N];
    kv_qgroup g[ROWS * TU_GROUP_STRIDE];
    for (size_t f = 0; f < sizeof tu_stored_formats / sizeof *tu_stored_formats; f++)
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
            kv_precision p = tu_stored_formats[f];
            int n = lengths[li];
            tu_groups gr;
            tu_random_groups(grouped ? p : KV_PREC_F32, ROWS, g, qsum, add, &gr);
            const kv_stored_groups *e = gr.e.g ? &gr.e : NULL;
            if (grouped && !e)
                continue;
            for (int r = 0; r < ROWS; r++)
                random_stored(p, n, x[r], values[r]);
            for (int i = 0; i < Q * N; i++)
                q[i] = y0[i] = frand();
            for (int i = 0; i < Q * ROWS; i++) {
                a[i] = frand();
                out0[i] = add ? frand() : 0.0f;
            }
            char what[64];
            snprintf(what, sizeof what, "%s %s%s%s", level, kv_precision_name(p),
                     e ? " groups" : "", add ? " added" : "");
            for (int nq = 1; nq <= Q; nq++) {
                memcpy(out, out0, sizeof out);
                dot(q, N, nq, x[0], 2 * N, ROWS, p, n, e, out, ROWS);
                for (int i = 0; i < nq; i++)
                    for (int r = 0; r < ROWS; r++) {
                        double d = 0, abs_sum = 0;
                        for (int j = 0; j < n; j++) {
                            d += (double)q[i * N + j] * values[r][j];
                            abs_sum += fabs((double)q[i * N + j] * values[r][j]);
                        }
                        double want = d;
                        if (e) {
                            want = out0[i * ROWS + r] + gr.scale[r] * d + gr.min[r] * qsum[i];
                            abs_sum = fabs(out0[i * ROWS + r]) + fabs(gr.scale[r]) * abs_sum +
                                      fabs(gr.min[r] * qsum[i]);
                        }
                        expect_close(out[i * ROWS + r], want, abs_sum, what, n, i);
                    }
                if (e) { /* scaled: the same scores times out_scale, bit for bit */
                    kv_stored_groups es = *e;
                    es.scaled = true;
                    es.out_scale = 0.08838835f;
                    float scaled[Q * ROWS];
                    memcpy(scaled, out0, sizeof scaled);
                    dot(q, N, nq, x[0], 2 * N, ROWS, p, n, &es, scaled, ROWS);
                    for (int k = 0; k < Q * ROWS; k++) {
                        float want = k < nq * ROWS ? out[k] * es.out_scale : out0[k];
                        cr_expect_eq(scaled[k], want, "%s scaled: out[%d] %.9g, want %.9g", what,
                                     k, scaled[k], want);
                    }
                }
                memcpy(y, y0, sizeof y);
                axpy(y, N, nq, a, ROWS, x[0], 2 * N, ROWS, p, n, e);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < n; j++) {
                        double want = y0[i * N + j], abs_sum = fabs(want);
                        for (int r = 0; r < ROWS; r++) {
                            double ar = a[i * ROWS + r], xr = values[r][j];
                            if (e)
                                xr = gr.min[r] + gr.scale[r] * xr;
                            want += ar * xr;
                            abs_sum += e ? fabs(ar * gr.min[r]) +
                                               fabs(ar * gr.scale[r] * values[r][j])
                                         : fabs(ar * xr);
                        }
                        expect_close(y[i * N + j], want, abs_sum, what, i, j);
                    }
                for (int i = 0; i < Q * N; i++) /* outputs beyond ny and n untouched */
                    if (i >= nq * N || i % N >= n)
                        cr_expect_eq(y[i], y0[i], "%s: axpy wrote y[%d][%d]", what, i / N, i % N);
                for (int i = nq * ROWS; i < Q * ROWS; i++)
                    cr_expect_eq(out[i], out0[i], "%s: dot wrote out[%d]", what, i);
            }
        }
}

/* dot and axpy, named `level` in messages: plain, and with groups. */
static inline void tu_check_stored_kernels(tu_dot_stored_fn *dot, tu_axpy_stored_fn *axpy,
                                           const char *level)
{
    tu_check_stored_pass(dot, axpy, level, false, false);
    tu_check_stored_pass(dot, axpy, level, true, false);
    tu_check_stored_pass(dot, axpy, level, true, true);
}

#endif
