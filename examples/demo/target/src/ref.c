/* The reference backend: each op written the plain way, accumulating in double, no fusion.
 * `bench --check` compares the other backends against it. */
#include "demo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void ref_binary(struct demo_tensor *dst, bool mul) {
    const struct demo_tensor *a = dst->src[0], *b = dst->src[1];
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        const float *x = demo_row_f32(a, r);
        const float *y = demo_row_f32(b, b->ne[1] == 1 ? 0 : r);
        float *z = demo_row_f32(dst, r);
        for (int64_t j = 0; j < dst->ne[0]; j++) {
            z[j] = mul ? x[j] * y[j] : x[j] + y[j];
        }
    }
}

static void ref_rms_norm(struct demo_tensor *dst) {
    const struct demo_tensor *a = dst->src[0];
    const int64_t n = a->ne[0];
    for (int64_t r = 0; r < a->ne[1]; r++) {
        const float *x = demo_row_f32(a, r);
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) {
            sum += (double)x[j] * x[j];
        }
        const double scale = 1.0 / sqrt(sum / (double)n + dst->params[0]);
        float *y = demo_row_f32(dst, r);
        for (int64_t j = 0; j < n; j++) {
            y[j] = (float)(x[j] * scale);
        }
    }
}

static void ref_get_rows(struct demo_tensor *dst) {
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        memcpy(demo_row_f32(dst, r), demo_row_f32(dst->src[0], dst->iparams[0] + r), dst->nb1);
    }
}

/* Like ggml, the f32 activations are quantized to Q8_0 first and the dot products are integer
 * sums per block, so the reference quantizes them the same way. */
static void ref_mul_mat(struct demo_tensor *dst) {
    const struct demo_tensor *w = dst->src[0], *x = dst->src[1];
    const int64_t n = w->ne[0], nblk = n / QK8_0;
    block_q8_0 *xq = malloc((size_t)nblk * sizeof(block_q8_0));
    for (int64_t m = 0; m < x->ne[1]; m++) {
        quantize_row_q8_0(demo_row_f32(x, m), xq, n);
        float *y = demo_row_f32(dst, m);
        for (int64_t r = 0; r < w->ne[1]; r++) {
            const block_q8_0 *wr = demo_row_q8_0(w, r);
            double sum = 0.0;
            for (int64_t b = 0; b < nblk; b++) {
                long sumi = 0;
                for (int i = 0; i < QK8_0; i++) {
                    sumi += (long)wr[b].qs[i] * xq[b].qs[i];
                }
                sum += (double)wr[b].d * xq[b].d * (double)sumi;
            }
            y[r] = (float)sum;
        }
    }
    free(xq);
}

static void ref_soft_max(struct demo_tensor *dst) {
    const struct demo_tensor *a = dst->src[0], *mask = dst->src[1];
    const int64_t n = a->ne[0];
    const double scale = dst->params[0];
    double *v = malloc((size_t)n * sizeof(double));
    for (int64_t r = 0; r < a->ne[1]; r++) {
        const float *x = demo_row_f32(a, r);
        double max = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            v[j] = x[j] * scale + (mask ? demo_row_f32(mask, 0)[j] : 0.0f);
            max = v[j] > max ? v[j] : max;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) {
            v[j] = exp(v[j] - max);
            sum += v[j];
        }
        float *y = demo_row_f32(dst, r);
        for (int64_t j = 0; j < n; j++) {
            y[j] = (float)(v[j] / sum);
        }
    }
    free(v);
}

static void ref_graph_compute(struct demo_graph *graph, struct demo_profile *prof) {
    for (int i = 0; i < graph->n_nodes; i++) {
        struct demo_tensor *node = graph->nodes[i];
        const int64_t t0 = demo_time_ns();
        switch (node->op) {
        case OP_ADD: ref_binary(node, false); break;
        case OP_MUL: ref_binary(node, true); break;
        case OP_RMS_NORM: ref_rms_norm(node); break;
        case OP_GET_ROWS: ref_get_rows(node); break;
        case OP_MUL_MAT: ref_mul_mat(node); break;
        case OP_SOFT_MAX: ref_soft_max(node); break;
        default: break;
        }
        if (prof != NULL) {
            prof->op_ns[node->op] += demo_time_ns() - t0;
        }
    }
}

const struct demo_backend demo_backend_ref = {"ref", ref_graph_compute};
