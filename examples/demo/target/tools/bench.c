/* bench: times the demo graph on one backend and prints METRIC lines; `--check` verifies
 * every op, every fused pair and the whole graph of the cpu and accel backends against the
 * reference backend.
 *
 * The graph is the output head of a small language model over a chunk of T tokens:
 *   hidden = rms_norm(x) * norm_weight             [T x D]  (an output: embeddings)
 *   last   = get_rows(hidden, T - M .. T)          [M x D]
 *   logits = mul_mat(W_q8_0, last) + bias          [M x V]
 *   probs  = soft_max(logits * 1/temperature + mask)  (an output: mask bans some tokens)
 *
 * One sample = the median time of BENCH_ITERS graph evaluations (after one warm-up). Times are
 * the process's CPU time (demo_time_ns), so a busy shared machine adds less noise; wall_ms
 * is the wall-clock median for comparison. */
#include "demo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shape {
    int64_t T, D, V, M;
};

/* The benchmark size. x is 24 MiB; with the normalised rows and the output the norm stage
 * touches 72 MiB, more than the last-level cache of a typical cloud VM's share. W is 13.5 MiB. */
static const struct shape BENCH_SHAPE = {3072, 2048, 6144, 1};

struct model {
    struct demo_ctx ctx;
    struct demo_tensor *x, *norm_w, *w, *bias, *mask;
    struct demo_tensor *hidden, *probs;
    struct demo_graph graph;
};

/* xorshift64*: the same data on every run and machine. */
static uint64_t rng_state;

static void rng_seed(uint64_t seed) {
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
}

static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* uniform in [-1, 1) */
static float rng_uniform(void) {
    return (float)((double)(rng_next() >> 40) / (double)(1ull << 23)) - 1.0f;
}

static void fill_uniform(struct demo_tensor *t, float lo, float hi) {
    for (int64_t r = 0; r < t->ne[1]; r++) {
        float *row = demo_row_f32(t, r);
        for (int64_t j = 0; j < t->ne[0]; j++) {
            row[j] = lo + (hi - lo) * 0.5f * (rng_uniform() + 1.0f);
        }
    }
}

static void fill_activations(struct demo_tensor *t) {
    for (int64_t r = 0; r < t->ne[1]; r++) {
        const float amp = 0.1f + 3.0f * 0.5f * (rng_uniform() + 1.0f); /* rows differ in norm */
        float *row = demo_row_f32(t, r);
        for (int64_t j = 0; j < t->ne[0]; j++) {
            row[j] = amp * rng_uniform();
        }
    }
}

/* Random Q8_0 weights, written as blocks directly (quantizing floats would be slow here). */
static void fill_q8_0(struct demo_tensor *t) {
    for (int64_t r = 0; r < t->ne[1]; r++) {
        block_q8_0 *row = (block_q8_0 *)demo_row_q8_0(t, r);
        for (int64_t b = 0; b < t->ne[0] / QK8_0; b++) {
            row[b].d = 0.0006f * (1.5f + 0.5f * rng_uniform());
            for (int i = 0; i < QK8_0; i += 8) {
                uint64_t bits = rng_next();
                for (int k = 0; k < 8; k++, bits >>= 8) {
                    row[b].qs[i + k] = (int8_t)((int)(bits & 0xff) % 255 - 127);
                }
            }
        }
    }
}

/* 0 for allowed tokens, -INFINITY for banned ones: every 13th and a run near the end. */
static void fill_mask(struct demo_tensor *t) {
    float *m = demo_row_f32(t, 0);
    for (int64_t j = 0; j < t->ne[0]; j++) {
        m[j] = (j % 13 == 5 || j >= t->ne[0] - t->ne[0] / 16) ? -INFINITY : 0.0f;
    }
}

static void model_init(struct model *md, struct shape s) {
    struct demo_ctx *ctx = &md->ctx;
    demo_ctx_init(ctx);
    rng_seed(42);
    md->x = demo_new_tensor(ctx, DEMO_TYPE_F32, s.D, s.T, "x");
    md->norm_w = demo_new_tensor(ctx, DEMO_TYPE_F32, s.D, 1, "norm_w");
    md->w = demo_new_tensor(ctx, DEMO_TYPE_Q8_0, s.D, s.V, "output_w");
    md->bias = demo_new_tensor(ctx, DEMO_TYPE_F32, s.V, 1, "output_b");
    md->mask = demo_new_tensor(ctx, DEMO_TYPE_F32, s.V, 1, "mask");
    fill_activations(md->x);
    fill_uniform(md->norm_w, 0.8f, 1.2f);
    fill_q8_0(md->w);
    fill_uniform(md->bias, -0.1f, 0.1f);
    fill_mask(md->mask);

    struct demo_tensor *normed = demo_rms_norm(ctx, md->x, 1e-5f);
    md->hidden = demo_mul(ctx, normed, md->norm_w);
    md->hidden->is_output = true;
    struct demo_tensor *last = demo_get_rows(ctx, md->hidden, (int32_t)(s.T - s.M), s.M);
    struct demo_tensor *logits = demo_add(ctx, demo_mul_mat(ctx, md->w, last), md->bias);
    md->probs = demo_soft_max_ext(ctx, logits, md->mask, 1.0f / 0.8f);
    md->probs->is_output = true;

    memset(&md->graph, 0, sizeof(md->graph));
    demo_build_forward(&md->graph, md->probs);
}

/* Bytes each node reads and writes, counting every node once (the unfused traffic). */
static double graph_bytes(const struct demo_graph *g) {
    double bytes = 0.0;
    for (int i = 0; i < g->n_nodes; i++) {
        const struct demo_tensor *node = g->nodes[i];
        bytes += (double)demo_nbytes(node);
        for (int s = 0; s < DEMO_MAX_SRC; s++) {
            if (node->src[s] == NULL) {
                continue;
            }
            /* GET_ROWS reads only the rows it copies. */
            bytes += node->op == OP_GET_ROWS ? (double)demo_nbytes(node)
                                             : (double)demo_nbytes(node->src[s]);
        }
    }
    return bytes;
}

/* Copy bandwidth (bytes read + written per second) over 32 MiB buffers: best of 3. */
static double measure_mem_bw_gbs(void) {
    const size_t n = (size_t)32 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (a == NULL || b == NULL) {
        return 0.0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        const int64_t t0 = demo_time_ns();
        memcpy(b, a, n);
        const double dt = (double)(demo_time_ns() - t0) * 1e-9;
        a[rep] = b[n - 1 - rep]; /* keep the copy observable */
        best = fmax(best, 2.0 * (double)n / dt / 1e9);
    }
    free(a);
    free(b);
    return best;
}

static int cmp_i64(const void *pa, const void *pb) {
    const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static double median_ms(int64_t *v, int n) {
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    const double mid = n % 2 ? (double)v[n / 2] : 0.5 * (double)(v[n / 2 - 1] + v[n / 2]);
    return mid * 1e-6;
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? atoi(v) : fallback;
}

static const struct demo_backend *find_backend(const char *name) {
    if (strcmp(name, "cpu") == 0) {
        return &demo_backend_cpu;
    }
    if (strcmp(name, "accel") == 0) {
        return &demo_backend_accel;
    }
    if (strcmp(name, "ref") == 0) {
        return &demo_backend_ref;
    }
    fprintf(stderr, "bench: unknown backend '%s' (cpu, accel or ref)\n", name);
    exit(2);
}

enum { MAX_ITERS = 1000 };

static int run_bench(const struct demo_backend *be, int reps, int iters) {
    struct model md;
    model_init(&md, BENCH_SHAPE);
    const double mem_bw = measure_mem_bw_gbs();
    const double bytes = graph_bytes(&md.graph);
    printf("# demo bench: backend=%s T=%lld D=%lld V=%lld M=%lld nodes=%d reps=%d iters=%d\n",
           be->name, (long long)BENCH_SHAPE.T, (long long)BENCH_SHAPE.D,
           (long long)BENCH_SHAPE.V, (long long)BENCH_SHAPE.M, md.graph.n_nodes, reps, iters);

    be->graph_compute(&md.graph, NULL); /* warm-up: page faults, caches */

    static int64_t total[MAX_ITERS], wall[MAX_ITERS], norm[MAX_ITERS], matvec[MAX_ITERS],
        softmax[MAX_ITERS];
    for (int rep = 0; rep < reps; rep++) {
        for (int it = 0; it < iters; it++) {
            struct demo_profile prof;
            memset(&prof, 0, sizeof(prof));
            const int64_t w0 = demo_wall_ns(), t0 = demo_time_ns();
            be->graph_compute(&md.graph, &prof);
            total[it] = demo_time_ns() - t0;
            wall[it] = demo_wall_ns() - w0;
            norm[it] = prof.op_ns[OP_RMS_NORM] + prof.op_ns[OP_MUL];
            matvec[it] = prof.op_ns[OP_GET_ROWS] + prof.op_ns[OP_MUL_MAT] + prof.op_ns[OP_ADD];
            softmax[it] = prof.op_ns[OP_SOFT_MAX];
        }
        const double ms = median_ms(total, iters);
        printf("METRIC throughput=%.3f\n", 1000.0 / ms);
        printf("METRIC graph_ms=%.4f\n", ms);
        printf("METRIC wall_ms=%.4f\n", median_ms(wall, iters));
        printf("METRIC rmsnorm_ms=%.4f\n", median_ms(norm, iters));
        printf("METRIC matvec_ms=%.4f\n", median_ms(matvec, iters));
        printf("METRIC softmax_ms=%.4f\n", median_ms(softmax, iters));
        printf("METRIC achieved_gbs=%.3f\n", bytes / (ms * 1e-3) / 1e9);
    }
    printf("METRIC bytes_per_iter=%.0f\n", bytes);
    printf("METRIC mem_bw_gbs=%.3f\n", mem_bw);
    demo_ctx_free(&md.ctx);
    return 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

#define CHECK_TOL 1e-4

static int n_checks, n_failed;
static char failed_names[1024];

/* max |got - want| / max |want|; NaN or Inf in got counts as a failure (returns INFINITY). */
static double rel_err(const float *got, const float *want, size_t n) {
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && got[i] != want[i]) {
            return INFINITY;
        }
        const double d = fabs((double)got[i] - (double)want[i]);
        err = d > err ? d : err;
        scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
    }
    return scale > 0.0 ? err / scale : err;
}

static void report(const char *backend, const char *what, const char *shape, double err) {
    n_checks++;
    const bool ok = err <= CHECK_TOL;
    if (!ok) {
        n_failed++;
        const size_t used = strlen(failed_names);
        snprintf(failed_names + used, sizeof(failed_names) - used, "%s%s %s [%s]",
                 used ? ", " : "", backend, what, shape);
    }
    printf("check %-5s %-18s %-18s %s err=%.2e%s\n", backend, what, shape, ok ? "ok  " : "FAIL",
           err, ok ? "" : " (tolerance 1e-04)");
}

static float *snapshot(const struct demo_tensor *t) {
    float *copy = malloc(demo_nbytes(t));
    memcpy(copy, t->data, demo_nbytes(t));
    return copy;
}

/* Runs the graph ending in `out` on the backend and on the reference; compares `out`. */
static void check_graph(const struct demo_backend *be, const char *what, const char *shape,
                        struct demo_tensor *out) {
    struct demo_graph g;
    memset(&g, 0, sizeof(g));
    out->is_output = true;
    demo_build_forward(&g, out);
    be->graph_compute(&g, NULL);
    float *got = snapshot(out);
    demo_backend_ref.graph_compute(&g, NULL);
    report(be->name, what, shape, rel_err(got, out->data, demo_nbytes(out) / sizeof(float)));
    free(got);
}

/* Single ops and fused pairs, each in a graph of its own, then the whole graph (both outputs).
 * With whole_graph_only, just the whole graph: enough at the benchmark's size, where the
 * reference is slow. */
static void check_shape(const struct demo_backend *be, struct shape s, bool whole_graph_only) {
    char shape[64];
    snprintf(shape, sizeof(shape), "T%lld D%lld V%lld", (long long)s.T, (long long)s.D,
             (long long)s.V);
    struct model md;
    model_init(&md, s);
    struct demo_ctx *ctx = &md.ctx;

    if (!whole_graph_only) {
        struct demo_tensor *logits = demo_new_tensor(ctx, DEMO_TYPE_F32, s.V, s.M, "logits_in");
        fill_uniform(logits, -6.0f, 6.0f);
        struct demo_tensor *rows = demo_new_tensor(ctx, DEMO_TYPE_F32, s.D, s.M, "rows");
        fill_activations(rows);

        check_graph(be, "RMS_NORM", shape, demo_rms_norm(ctx, md.x, 1e-5f));
        check_graph(be, "MUL", shape, demo_mul(ctx, md.x, md.norm_w));
        check_graph(be, "ADD", shape, demo_add(ctx, md.x, md.norm_w));
        check_graph(be, "GET_ROWS", shape, demo_get_rows(ctx, md.x, 1, s.M));
        check_graph(be, "MUL_MAT", shape, demo_mul_mat(ctx, md.w, rows));
        check_graph(be, "SOFT_MAX", shape, demo_soft_max_ext(ctx, logits, md.mask, 0.7f));
        check_graph(be, "SOFT_MAX(no mask)", shape, demo_soft_max_ext(ctx, logits, NULL, 1.3f));
        check_graph(be, "RMS_NORM+MUL", shape,
                    demo_mul(ctx, demo_rms_norm(ctx, md.x, 1e-5f), md.norm_w));
        check_graph(be, "MUL_MAT+ADD", shape,
                    demo_add(ctx, demo_mul_mat(ctx, md.w, rows), md.bias));
    }

    be->graph_compute(&md.graph, NULL);
    float *hidden = snapshot(md.hidden), *probs = snapshot(md.probs);
    demo_backend_ref.graph_compute(&md.graph, NULL);
    report(be->name, "graph:hidden", shape,
           rel_err(hidden, md.hidden->data, demo_nbytes(md.hidden) / sizeof(float)));
    report(be->name, "graph:probs", shape,
           rel_err(probs, md.probs->data, demo_nbytes(md.probs) / sizeof(float)));
    free(hidden);
    free(probs);
    demo_ctx_free(ctx);
}

static int run_checks(void) {
    /* Row counts that are not multiples of anything, rows of 64 up to 1024 elements, and
     * several activation vectors for MUL_MAT; then the benchmark's own graph. */
    const struct shape shapes[] = {{5, 64, 96, 2}, {37, 256, 992, 3}, {129, 1024, 4064, 4}};
    const struct demo_backend *backends[] = {&demo_backend_cpu, &demo_backend_accel};
    for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
            check_shape(backends[b], shapes[i], false);
        }
        check_shape(backends[b], BENCH_SHAPE, true);
    }
    printf("checks: %d passed, %d failed\n", n_checks - n_failed, n_failed);
    if (n_failed > 0) {
        fprintf(stderr, "bench --check: mismatch against the reference in %s\n", failed_names);
    }
    return n_failed == 0 ? 0 : 1;
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench [--check] [--backend cpu|accel|ref] [--reps N] [--iters N]\n"
            "  --reps N   samples to print (default $BENCH_REPS or 1)\n"
            "  --iters N  graph evaluations per sample, whose median is the sample\n"
            "             (default $BENCH_ITERS or 5)\n"
            "  --check    compare every op and the whole graph with the reference; exit 1\n"
            "             on a mismatch\n");
}

int main(int argc, char **argv) {
    const char *backend = getenv("BENCH_BACKEND") ? getenv("BENCH_BACKEND") : "cpu";
    int reps = env_int("BENCH_REPS", 1);
    int iters = env_int("BENCH_ITERS", 5);
    bool check = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) {
            check = true;
        } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            backend = argv[++i];
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else {
            usage();
            return 2;
        }
    }
    if (check) {
        return run_checks();
    }
    if (reps < 1 || iters < 1 || iters > MAX_ITERS) {
        fprintf(stderr, "bench: --reps must be >= 1 and --iters between 1 and %d\n", MAX_ITERS);
        return 2;
    }
    return run_bench(find_backend(backend), reps, iters);
}
