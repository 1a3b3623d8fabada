/* The constants of the vector e^x (kernels.c's exp8, attn_dnnl_avx512.c's
 * exp16): Cody-Waite reduction by ln 2 split in two parts, then Cephes'
 * degree-5 polynomial, about 1 ulp. One place, so the 8- and 16-lane
 * softmaxes stay the same function. */
#ifndef KV_EXP_POLY_H
#define KV_EXP_POLY_H

#define KV_EXP_LO (-87.33654f) /* below: e^x underflows */
#define KV_EXP_HI 88.72283f    /* above: e^x overflows */
#define KV_EXP_LOG2E 1.44269504088896341f
#define KV_EXP_LN2_HI 0.693359375f
#define KV_EXP_LN2_LO (-2.12194440e-4f)
#define KV_EXP_P0 1.9875691500e-4f
#define KV_EXP_P1 1.3981999507e-3f
#define KV_EXP_P2 8.3334519073e-3f
#define KV_EXP_P3 4.1665795894e-2f
#define KV_EXP_P4 1.6666665459e-1f
#define KV_EXP_P5 5.0000001201e-1f

#endif
