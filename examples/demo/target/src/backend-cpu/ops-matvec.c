/* MUL_MAT with Q8_0 weights on the CPU backend: a matrix-vector product per activation row. */
#include "cpu-ops.h"

#include <stdlib.h>
#include <string.h>

/* Integer dot product of two Q8_0 blocks, scaled by both block scales. */
static inline float vec_dot_q8_0(const block_q8_0 *restrict w, const block_q8_0 *restrict x) {
    int32_t sumi = 0;
    for (int i = 0; i < QK8_0; i++) {
        sumi += (int32_t)w->qs[i] * (int32_t)x->qs[i];
    }
    return (float)sumi * (w->d * x->d);
}

void cpu_mul_mat_q8_0(struct demo_tensor *dst, const struct demo_tensor *w,
                      const struct demo_tensor *x, const struct demo_tensor *bias) {
    const int64_t n = w->ne[0];
    const int64_t nblk = n / QK8_0;
    const int64_t n_rows = w->ne[1];
    const int64_t n_vecs = x->ne[1];

    /* Like ggml, quantize the activations to Q8_0 once so each dot product is integer math. */
    block_q8_0 *xq = malloc((size_t)(n_vecs * nblk) * sizeof(block_q8_0));
    for (int64_t m = 0; m < n_vecs; m++) {
        quantize_row_q8_0(demo_row_f32(x, m), xq + m * nblk, n);
    }

    for (int64_t m = 0; m < n_vecs; m++) {
        const block_q8_0 *xm = xq + m * nblk;
        float *y = demo_row_f32(dst, m);
        memset(y, 0, (size_t)n_rows * sizeof(float));

        /* Walk the weights one block column at a time so the activation block stays in
         * registers while every row's partial sum is updated. */
        for (int64_t b = 0; b < nblk; b++) {
            for (int64_t r = 0; r < n_rows; r++) {
                y[r] += vec_dot_q8_0(demo_row_q8_0(w, r) + b, xm + b);
            }
        }

        if (bias != NULL) {
            const float *bv = demo_row_f32(bias, 0);
            for (int64_t r = 0; r < n_rows; r++) {
                y[r] += bv[r];
            }
        }
    }
    free(xq);
}
