/* RMS_NORM on the CPU backend. */
#include "cpu-ops.h"

#include <math.h>

/* y = x / sqrt(mean(x^2) + eps), row by row: one pass for the sum of squares, one to scale.
 * A row (a few KiB) stays in L1 between the two passes. */
void cpu_rms_norm(struct demo_tensor *dst) {
    const struct demo_tensor *src = dst->src[0];
    const int64_t n = src->ne[0];
    const float eps = dst->params[0];

    for (int64_t r = 0; r < src->ne[1]; r++) {
        const float *x = demo_row_f32(src, r);
        const float mean = cpu_vec_sum_sq(x, n) / (float)n;
        const float scale = 1.0f / sqrtf(mean + eps);
        cpu_vec_scale(demo_row_f32(dst, r), x, scale, n);
    }
}
