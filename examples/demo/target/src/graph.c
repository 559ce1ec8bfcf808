/* Tensors, graph construction and the fusion test shared by all backends. */
#include "demo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what) {
    fprintf(stderr, "demo: %s\n", what);
    exit(2);
}

void demo_ctx_init(struct demo_ctx *ctx) {
    memset(ctx, 0, sizeof(*ctx));
}

void demo_ctx_free(struct demo_ctx *ctx) {
    for (int i = 0; i < ctx->n_tensors; i++) {
        free(ctx->tensors[i].data);
    }
    ctx->n_tensors = 0;
}

static size_t row_bytes(enum demo_type type, int64_t ne0) {
    if (type == DEMO_TYPE_Q8_0) {
        return (size_t)(ne0 / QK8_0) * sizeof(block_q8_0);
    }
    return (size_t)ne0 * sizeof(float);
}

size_t demo_nbytes(const struct demo_tensor *t) {
    return (size_t)t->ne[1] * t->nb1;
}

struct demo_tensor *demo_new_tensor(struct demo_ctx *ctx, enum demo_type type, int64_t ne0,
                                    int64_t ne1, const char *name) {
    if (ctx->n_tensors == DEMO_MAX_TENSORS) {
        die("too many tensors");
    }
    /* Every row length is a whole number of Q8_0 blocks, so kernels can work in chunks. */
    if (ne0 <= 0 || ne1 <= 0 || ne0 % QK8_0 != 0) {
        die("tensor rows must be a positive multiple of 32 elements");
    }
    struct demo_tensor *t = &ctx->tensors[ctx->n_tensors++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->nb1 = row_bytes(type, ne0);
    void *data = NULL;
    if (posix_memalign(&data, 64, demo_nbytes(t)) != 0) {
        die("out of memory");
    }
    t->data = data;
    snprintf(t->name, sizeof(t->name), "%s", name);
    return t;
}

static struct demo_tensor *new_op(struct demo_ctx *ctx, enum demo_op op, int64_t ne0, int64_t ne1,
                                  struct demo_tensor *a, struct demo_tensor *b) {
    struct demo_tensor *t = demo_new_tensor(ctx, DEMO_TYPE_F32, ne0, ne1, demo_op_name(op));
    t->op = op;
    t->src[0] = a;
    t->src[1] = b;
    return t;
}

static void check_broadcast(const struct demo_tensor *a, const struct demo_tensor *b) {
    if (a->type != DEMO_TYPE_F32 || b->type != DEMO_TYPE_F32 || a->ne[0] != b->ne[0] ||
        (b->ne[1] != 1 && b->ne[1] != a->ne[1])) {
        die("binary op: shapes do not broadcast");
    }
}

struct demo_tensor *demo_add(struct demo_ctx *ctx, struct demo_tensor *a, struct demo_tensor *b) {
    check_broadcast(a, b);
    return new_op(ctx, OP_ADD, a->ne[0], a->ne[1], a, b);
}

struct demo_tensor *demo_mul(struct demo_ctx *ctx, struct demo_tensor *a, struct demo_tensor *b) {
    check_broadcast(a, b);
    return new_op(ctx, OP_MUL, a->ne[0], a->ne[1], a, b);
}

struct demo_tensor *demo_rms_norm(struct demo_ctx *ctx, struct demo_tensor *a, float eps) {
    struct demo_tensor *t = new_op(ctx, OP_RMS_NORM, a->ne[0], a->ne[1], a, NULL);
    t->params[0] = eps;
    return t;
}

struct demo_tensor *demo_get_rows(struct demo_ctx *ctx, struct demo_tensor *a, int32_t first,
                                  int64_t n_rows) {
    if (first < 0 || first + n_rows > a->ne[1]) {
        die("get_rows: rows out of range");
    }
    struct demo_tensor *t = new_op(ctx, OP_GET_ROWS, a->ne[0], n_rows, a, NULL);
    t->iparams[0] = first;
    return t;
}

struct demo_tensor *demo_mul_mat(struct demo_ctx *ctx, struct demo_tensor *w,
                                 struct demo_tensor *x) {
    if (w->type != DEMO_TYPE_Q8_0 || x->type != DEMO_TYPE_F32 || w->ne[0] != x->ne[0]) {
        die("mul_mat: needs Q8_0 weights and f32 rows of the same length");
    }
    return new_op(ctx, OP_MUL_MAT, w->ne[1], x->ne[1], w, x);
}

struct demo_tensor *demo_soft_max_ext(struct demo_ctx *ctx, struct demo_tensor *a,
                                      struct demo_tensor *mask, float scale) {
    if (mask != NULL && (mask->ne[0] != a->ne[0] || mask->ne[1] != 1)) {
        die("soft_max: the mask must be one row as long as the input rows");
    }
    struct demo_tensor *t = new_op(ctx, OP_SOFT_MAX, a->ne[0], a->ne[1], a, mask);
    t->params[0] = scale;
    return t;
}

static bool in_graph(const struct demo_graph *graph, const struct demo_tensor *t) {
    for (int i = 0; i < graph->n_nodes; i++) {
        if (graph->nodes[i] == t) {
            return true;
        }
    }
    return false;
}

/* Appends t and everything it depends on, sources first (like ggml_build_forward_expand). */
void demo_build_forward(struct demo_graph *graph, struct demo_tensor *t) {
    if (t == NULL || t->op == OP_NONE || in_graph(graph, t)) {
        return;
    }
    for (int s = 0; s < DEMO_MAX_SRC; s++) {
        demo_build_forward(graph, t->src[s]);
    }
    if (graph->n_nodes == DEMO_MAX_NODES) {
        die("too many graph nodes");
    }
    graph->nodes[graph->n_nodes++] = t;
}

int demo_graph_n_uses(const struct demo_graph *graph, const struct demo_tensor *t) {
    int uses = 0;
    for (int i = 0; i < graph->n_nodes; i++) {
        for (int s = 0; s < DEMO_MAX_SRC; s++) {
            uses += graph->nodes[i]->src[s] == t;
        }
    }
    return uses;
}

/* True when nodes i .. i+n_ops-1 have exactly these ops and form a chain whose intermediate
 * results nobody else reads, so a backend may compute the chain in one kernel without
 * materialising the intermediates (the shape of ggml_can_fuse). The backend still checks
 * the shapes its fused kernel supports. */
bool demo_can_fuse(const struct demo_graph *graph, int i, const enum demo_op *ops, int n_ops) {
    if (i < 0 || i + n_ops > graph->n_nodes) {
        return false;
    }
    for (int k = 0; k < n_ops; k++) {
        if (graph->nodes[i + k]->op != ops[k]) {
            return false;
        }
    }
    for (int k = 0; k + 1 < n_ops; k++) {
        const struct demo_tensor *node = graph->nodes[i + k];
        const struct demo_tensor *next = graph->nodes[i + k + 1];
        if (node->is_output || demo_graph_n_uses(graph, node) != 1) {
            return false;
        }
        if (next->src[0] != node && next->src[1] != node) {
            return false;
        }
    }
    return true;
}

const char *demo_op_name(enum demo_op op) {
    static const char *const names[OP_COUNT] = {
        [OP_NONE] = "NONE",         [OP_ADD] = "ADD",         [OP_MUL] = "MUL",
        [OP_RMS_NORM] = "RMS_NORM", [OP_GET_ROWS] = "GET_ROWS", [OP_MUL_MAT] = "MUL_MAT",
        [OP_SOFT_MAX] = "SOFT_MAX",
    };
    return (op >= 0 && op < OP_COUNT) ? names[op] : "?";
}

static int64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t demo_time_ns(void) {
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

int64_t demo_wall_ns(void) {
    return clock_ns(CLOCK_MONOTONIC);
}
