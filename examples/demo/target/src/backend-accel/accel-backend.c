/* The "accel" backend: the same ops written for a SIMD unit (AVX2 + FMA intrinsics when the
 * compiler targets them, plain C otherwise), and more aggressive graph fusion than the CPU
 * backend. `bench --check` verifies it; `bench --backend accel` benchmarks it.
 *
 * Fusions:
 *   RMS_NORM + MUL  one pass writes x * scale * weight; the normalised rows never hit memory
 *   MUL_MAT + ADD   the bias is added while each output row is finished */
#include "demo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ACCEL_SIMD 1
#endif

static float accel_sum_sq(const float *x, int64_t n) {
#ifdef ACCEL_SIMD
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256 a = _mm256_loadu_ps(x + j);
        const __m256 b = _mm256_loadu_ps(x + j + 8);
        acc0 = _mm256_fmadd_ps(a, a, acc0);
        acc1 = _mm256_fmadd_ps(b, b, acc1);
    }
    for (; j < n; j += 8) {
        const __m256 a = _mm256_loadu_ps(x + j);
        acc0 = _mm256_fmadd_ps(a, a, acc0);
    }
    const __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
#else
    float acc[8] = {0.0f};
    for (int64_t j = 0; j < n; j += 8) {
        for (int k = 0; k < 8; k++) {
            acc[k] += x[j + k] * x[j + k];
        }
    }
    float sum = 0.0f;
    for (int k = 0; k < 8; k++) {
        sum += acc[k];
    }
    return sum;
#endif
}

/* z = (x * scale) * w: the RMS_NORM output goes straight into the MUL, in registers. */
static void rms_norm_mul_row(float *z, const float *x, const float *w, float scale, int64_t n) {
#ifdef ACCEL_SIMD
    const __m256 vs = _mm256_set1_ps(scale);
    for (int64_t j = 0; j < n; j += 8) {
        const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + j), vs);
        _mm256_storeu_ps(z + j, _mm256_mul_ps(y, _mm256_loadu_ps(w + j)));
    }
#else
    for (int64_t j = 0; j < n; j++) {
        z[j] = (x[j] * scale) * w[j];
    }
#endif
}

static void binary_row(float *z, const float *x, const float *y, int64_t n, bool mul) {
    for (int64_t j = 0; j < n; j++) {
        z[j] = mul ? x[j] * y[j] : x[j] + y[j];
    }
}

static void accel_binary(struct demo_tensor *dst, bool mul) {
    const struct demo_tensor *a = dst->src[0], *b = dst->src[1];
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        binary_row(demo_row_f32(dst, r), demo_row_f32(a, r),
                   demo_row_f32(b, b->ne[1] == 1 ? 0 : r), dst->ne[0], mul);
    }
}

static float rms_scale(const float *x, int64_t n, float eps) {
    return 1.0f / sqrtf(accel_sum_sq(x, n) / (float)n + eps);
}

static void accel_rms_norm(struct demo_tensor *dst) {
    const struct demo_tensor *src = dst->src[0];
    const int64_t n = src->ne[0];
    for (int64_t r = 0; r < src->ne[1]; r++) {
        const float *x = demo_row_f32(src, r);
        const float scale = rms_scale(x, n, dst->params[0]);
        float *y = demo_row_f32(dst, r);
        for (int64_t j = 0; j < n; j++) {
            y[j] = x[j] * scale;
        }
    }
}

/* dst = rms_norm(src, eps) * weight, in one pass over src. weight is one row, broadcast. */
static void rms_norm_mul_fused(struct demo_tensor *dst, const struct demo_tensor *src, float eps,
                               const struct demo_tensor *weight) {
    const int64_t n = src->ne[0];
    const float *w = demo_row_f32(weight, 0);
    for (int64_t r = 0; r < src->ne[1]; r++) {
        const float *x = demo_row_f32(src, r);
        rms_norm_mul_row(demo_row_f32(dst, r), x, w, rms_scale(x, n, eps), n);
    }
}

static void accel_get_rows(struct demo_tensor *dst) {
    for (int64_t r = 0; r < dst->ne[1]; r++) {
        memcpy(demo_row_f32(dst, r), demo_row_f32(dst->src[0], dst->iparams[0] + r), dst->nb1);
    }
}

static float dot_q8_0(const block_q8_0 *w, const block_q8_0 *x) {
    int32_t sumi = 0;
    for (int i = 0; i < QK8_0; i++) {
        sumi += (int32_t)w->qs[i] * (int32_t)x->qs[i];
    }
    return (float)sumi * (w->d * x->d);
}

/* Row-major walk: each weight row is read once, for every activation vector. */
static void accel_mul_mat(struct demo_tensor *dst, const struct demo_tensor *w,
                          const struct demo_tensor *x, const struct demo_tensor *bias) {
    const int64_t n = w->ne[0], nblk = n / QK8_0, n_vecs = x->ne[1];
    block_q8_0 *xq = malloc((size_t)(n_vecs * nblk) * sizeof(block_q8_0));
    for (int64_t m = 0; m < n_vecs; m++) {
        quantize_row_q8_0(demo_row_f32(x, m), xq + m * nblk, n);
    }
    for (int64_t r = 0; r < w->ne[1]; r++) {
        const block_q8_0 *wr = demo_row_q8_0(w, r);
        for (int64_t m = 0; m < n_vecs; m++) {
            const block_q8_0 *xm = xq + m * nblk;
            float sum = 0.0f;
            for (int64_t b = 0; b < nblk; b++) {
                sum += dot_q8_0(wr + b, xm + b);
            }
            demo_row_f32(dst, m)[r] = sum + (bias != NULL ? demo_row_f32(bias, 0)[r] : 0.0f);
        }
    }
    free(xq);
}

/* Online softmax: the maximum and the sum of exponentials in one pass (the sum is rescaled
 * whenever the maximum grows), then one pass to write the probabilities. */
static void accel_soft_max(struct demo_tensor *dst) {
    const struct demo_tensor *src = dst->src[0], *mask = dst->src[1];
    const int64_t n = src->ne[0];
    const float scale = dst->params[0];
    const float *mp = mask != NULL ? demo_row_f32(mask, 0) : NULL;
    for (int64_t r = 0; r < src->ne[1]; r++) {
        const float *x = demo_row_f32(src, r);
        float max = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float v = x[j] * scale + (mp != NULL ? mp[j] : 0.0f);
            if (v == -INFINITY) {
                continue;
            }
            if (v > max) {
                sum = sum * expf(max - v) + 1.0f;
                max = v;
            } else {
                sum += expf(v - max);
            }
        }
        const float inv_sum = 1.0f / sum;
        float *y = demo_row_f32(dst, r);
        for (int64_t j = 0; j < n; j++) {
            const float v = x[j] * scale + (mp != NULL ? mp[j] : 0.0f);
            y[j] = expf(v - max) * inv_sum;
        }
    }
}

static const struct demo_tensor *other_src(const struct demo_tensor *node,
                                           const struct demo_tensor *prev) {
    return node->src[0] == prev ? node->src[1] : node->src[0];
}

static bool is_row(const struct demo_tensor *t, int64_t n) {
    return t->ne[1] == 1 && t->ne[0] == n;
}

static void accel_graph_compute(struct demo_graph *graph, struct demo_profile *prof) {
    for (int i = 0; i < graph->n_nodes; i++) {
        struct demo_tensor *node = graph->nodes[i];
        const int64_t t0 = demo_time_ns();
        int n_fused = 1;

        if (demo_can_fuse(graph, i, (enum demo_op[]){OP_RMS_NORM, OP_MUL}, 2) &&
            is_row(other_src(graph->nodes[i + 1], node), node->ne[0])) {
            struct demo_tensor *mul = graph->nodes[i + 1];
            rms_norm_mul_fused(mul, node->src[0], node->params[0], other_src(mul, node));
            n_fused = 2;
        } else if (demo_can_fuse(graph, i, (enum demo_op[]){OP_MUL_MAT, OP_ADD}, 2) &&
                   is_row(other_src(graph->nodes[i + 1], node), node->ne[0])) {
            struct demo_tensor *add = graph->nodes[i + 1];
            accel_mul_mat(add, node->src[0], node->src[1], other_src(add, node));
            n_fused = 2;
        } else {
            switch (node->op) {
            case OP_ADD: accel_binary(node, false); break;
            case OP_MUL: accel_binary(node, true); break;
            case OP_RMS_NORM: accel_rms_norm(node); break;
            case OP_GET_ROWS: accel_get_rows(node); break;
            case OP_MUL_MAT: accel_mul_mat(node, node->src[0], node->src[1], NULL); break;
            case OP_SOFT_MAX: accel_soft_max(node); break;
            default:
                fprintf(stderr, "accel backend: unsupported op %s\n", demo_op_name(node->op));
                exit(2);
            }
        }

        if (prof != NULL) {
            prof->op_ns[node->op] += demo_time_ns() - t0;
        }
        i += n_fused - 1;
    }
}

const struct demo_backend demo_backend_accel = {"accel", accel_graph_compute};
