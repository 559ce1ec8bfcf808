/* SOFT_MAX with scale and mask on the CPU backend. */
#include "cpu-ops.h"

#include <math.h>

/* y = softmax(x * scale + mask), row by row, in three passes: the scaled and masked logits and
 * their maximum, then exp() and the sum, then the normalisation. Masked entries are -INFINITY
 * and come out as exactly 0. */
void cpu_soft_max(struct demo_tensor *dst) {
    const struct demo_tensor *src = dst->src[0];
    const struct demo_tensor *mask = dst->src[1];
    const int64_t n = src->ne[0];
    const float scale = dst->params[0];
    const float *mp = mask != NULL ? demo_row_f32(mask, 0) : NULL;

    for (int64_t r = 0; r < src->ne[1]; r++) {
        const float *x = demo_row_f32(src, r);
        float *y = demo_row_f32(dst, r);

        float max = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float v = x[j] * scale + (mp != NULL ? mp[j] : 0.0f);
            y[j] = v;
            max = v > max ? v : max;
        }

        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float e = expf(y[j] - max);
            y[j] = e;
            sum += e;
        }

        const float inv_sum = 1.0f / sum;
        for (int64_t j = 0; j < n; j++) {
            y[j] *= inv_sum;
        }
    }
}
