/* Elementwise ops of the CPU backend: ADD and MUL (second operand one row, broadcast, or the
 * same shape), and GET_ROWS. */
#include "cpu-ops.h"

#include <string.h>

static const float *broadcast_row(const struct demo_tensor *b, int64_t r) {
    return demo_row_f32(b, b->ne[1] == 1 ? 0 : r);
}

void cpu_add(struct demo_tensor *dst) {
    const struct demo_tensor *a = dst->src[0], *b = dst->src[1];
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        cpu_vec_add(demo_row_f32(dst, r), demo_row_f32(a, r), broadcast_row(b, r), dst->ne[0]);
    }
}

void cpu_mul(struct demo_tensor *dst) {
    const struct demo_tensor *a = dst->src[0], *b = dst->src[1];
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        cpu_vec_mul(demo_row_f32(dst, r), demo_row_f32(a, r), broadcast_row(b, r), dst->ne[0]);
    }
}

void cpu_get_rows(struct demo_tensor *dst) {
    const struct demo_tensor *a = dst->src[0];
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        memcpy(demo_row_f32(dst, r), demo_row_f32(a, dst->iparams[0] + r), dst->nb1);
    }
}
