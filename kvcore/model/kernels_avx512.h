/* The AVX-512F level's GEMV, which the AVX512_BF16 level reuses for F32
 * mode (vdpbf16ps is only exact for inputs that are BF16 already), and its
 * decode attention kernels, which it reuses. Only to be called on a CPU
 * with AVX-512F/BW/VL. */
#ifndef KV_KERNELS_AVX512_H
#define KV_KERNELS_AVX512_H

#include "model/kernels_isa.h"

void kv_avx512_prepare(const float *x, int n, kv_compute mode, void *xp);
void kv_avx512_rows(const kv_weight *w, int r0, int r1, const float *x, const void *xp,
                    kv_compute mode, float *y);
void kv_avx512_rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                          int batch, kv_compute mode, float *y, size_t ldy);
bool kv_avx512_dot8(const float *a, const float *b, size_t stride, int n, float scale, float *out);
int kv_avx512_axpy_rows(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                        const float *x, size_t x_stride, int nx, int n);

#endif
