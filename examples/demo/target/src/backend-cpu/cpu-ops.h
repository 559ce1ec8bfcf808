/* Kernels of the CPU backend and the small vector helpers they share.
 *
 * Row lengths are multiples of 32 (see demo_new_tensor), so the helpers work in chunks of
 * CPU_LANES floats: a fixed-length inner loop that the compiler turns into SIMD code at -O2
 * and that keeps CPU_LANES independent sums instead of one long dependency chain. */
#ifndef CPU_OPS_H
#define CPU_OPS_H

#include "demo.h"

#define CPU_LANES 8

static inline float cpu_vec_sum_sq(const float *restrict x, int64_t n) {
    float acc[CPU_LANES] = {0.0f};
    for (int64_t j = 0; j < n; j += CPU_LANES) {
        for (int k = 0; k < CPU_LANES; k++) {
            acc[k] += x[j + k] * x[j + k];
        }
    }
    float sum = 0.0f;
    for (int k = 0; k < CPU_LANES; k++) {
        sum += acc[k];
    }
    return sum;
}

/* y = x * s */
static inline void cpu_vec_scale(float *restrict y, const float *restrict x, float s, int64_t n) {
    for (int64_t j = 0; j < n; j += CPU_LANES) {
        for (int k = 0; k < CPU_LANES; k++) {
            y[j + k] = x[j + k] * s;
        }
    }
}

/* z = x * y */
static inline void cpu_vec_mul(float *restrict z, const float *restrict x,
                               const float *restrict y, int64_t n) {
    for (int64_t j = 0; j < n; j += CPU_LANES) {
        for (int k = 0; k < CPU_LANES; k++) {
            z[j + k] = x[j + k] * y[j + k];
        }
    }
}

/* z = x + y */
static inline void cpu_vec_add(float *restrict z, const float *restrict x,
                               const float *restrict y, int64_t n) {
    for (int64_t j = 0; j < n; j += CPU_LANES) {
        for (int k = 0; k < CPU_LANES; k++) {
            z[j + k] = x[j + k] + y[j + k];
        }
    }
}

/* ops-elementwise.c */
void cpu_add(struct demo_tensor *dst);
void cpu_mul(struct demo_tensor *dst);
void cpu_get_rows(struct demo_tensor *dst);

/* ops-norm.c */
void cpu_rms_norm(struct demo_tensor *dst);

/* ops-matvec.c: dst = w x (+ bias when bias is not NULL; bias is one row of dst->ne[0]) */
void cpu_mul_mat_q8_0(struct demo_tensor *dst, const struct demo_tensor *w,
                      const struct demo_tensor *x, const struct demo_tensor *bias);

/* ops-softmax.c */
void cpu_soft_max(struct demo_tensor *dst);

#endif /* CPU_OPS_H */
