/* demo: a tiny ggml-like compute graph with two backends.
 *
 * Tensors are 2-D (ne[0] elements per row, ne[1] rows) and row-major. A graph is an array of
 * nodes in execution order; a backend walks it and may fuse consecutive nodes it recognises
 * with demo_can_fuse(). */
#ifndef DEMO_H
#define DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Q8_0: blocks of 32 signed 8-bit weights sharing one scale (like ggml's Q8_0, with a float
 * scale instead of fp16 to stay plain C99). value = d * qs[i]. */
#define QK8_0 32
typedef struct {
    float d;
    int8_t qs[QK8_0];
} block_q8_0;

enum demo_type {
    DEMO_TYPE_F32,
    DEMO_TYPE_Q8_0,
};

enum demo_op {
    OP_NONE,      /* a leaf: input or weight */
    OP_ADD,       /* dst = src0 + src1 (src1 may be one row, broadcast) */
    OP_MUL,       /* dst = src0 * src1 (src1 may be one row, broadcast) */
    OP_RMS_NORM,  /* dst = src0 / sqrt(mean(src0^2) + eps), per row; params[0] = eps */
    OP_GET_ROWS,  /* dst = rows [iparams[0], iparams[0] + dst->ne[1]) of src0 */
    OP_MUL_MAT,   /* dst[m][r] = dot(src0 row r, src1 row m); src0 is Q8_0, src1 is f32 and is
                   * quantized to Q8_0 first (as ggml does), so the dots are integer sums */
    OP_SOFT_MAX,  /* dst = softmax(src0 * params[0] + src1), per row; src1 = mask row or NULL */
    OP_COUNT,
};

#define DEMO_MAX_SRC 2
#define DEMO_MAX_NAME 32

struct demo_tensor {
    enum demo_type type;
    int64_t ne[2]; /* ne[0]: elements per row, ne[1]: rows */
    size_t nb1;    /* bytes per row */
    void *data;
    enum demo_op op;
    struct demo_tensor *src[DEMO_MAX_SRC];
    float params[2];
    int32_t iparams[2];
    bool is_output; /* its value must be visible after the graph runs: never fused away */
    char name[DEMO_MAX_NAME];
};

#define DEMO_MAX_TENSORS 64
#define DEMO_MAX_NODES 64

/* Owns every tensor made from it and their data. */
struct demo_ctx {
    int n_tensors;
    struct demo_tensor tensors[DEMO_MAX_TENSORS];
};

struct demo_graph {
    int n_nodes;
    struct demo_tensor *nodes[DEMO_MAX_NODES];
};

/* Time spent per op, in nanoseconds. A fused group is charged to the op of its first node. */
struct demo_profile {
    int64_t op_ns[OP_COUNT];
};

struct demo_backend {
    const char *name;
    void (*graph_compute)(struct demo_graph *graph, struct demo_profile *prof);
};

extern const struct demo_backend demo_backend_cpu;
extern const struct demo_backend demo_backend_accel;
extern const struct demo_backend demo_backend_ref; /* straightforward reference, no fusion */

/* graph.c */
void demo_ctx_init(struct demo_ctx *ctx);
void demo_ctx_free(struct demo_ctx *ctx);
struct demo_tensor *demo_new_tensor(struct demo_ctx *ctx, enum demo_type type, int64_t ne0,
                                    int64_t ne1, const char *name);
struct demo_tensor *demo_add(struct demo_ctx *ctx, struct demo_tensor *a, struct demo_tensor *b);
struct demo_tensor *demo_mul(struct demo_ctx *ctx, struct demo_tensor *a, struct demo_tensor *b);
struct demo_tensor *demo_rms_norm(struct demo_ctx *ctx, struct demo_tensor *a, float eps);
struct demo_tensor *demo_get_rows(struct demo_ctx *ctx, struct demo_tensor *a, int32_t first,
                                  int64_t n_rows);
struct demo_tensor *demo_mul_mat(struct demo_ctx *ctx, struct demo_tensor *w,
                                 struct demo_tensor *x);
struct demo_tensor *demo_soft_max_ext(struct demo_ctx *ctx, struct demo_tensor *a,
                                      struct demo_tensor *mask, float scale);
void demo_build_forward(struct demo_graph *graph, struct demo_tensor *t);
int demo_graph_n_uses(const struct demo_graph *graph, const struct demo_tensor *t);
bool demo_can_fuse(const struct demo_graph *graph, int i, const enum demo_op *ops, int n_ops);
const char *demo_op_name(enum demo_op op);
size_t demo_nbytes(const struct demo_tensor *t);
/* CPU time of the process in ns: time the scheduler gives to other tenants of a shared machine
 * does not count. The backends are single-threaded, so it is their running time. */
int64_t demo_time_ns(void);
int64_t demo_wall_ns(void); /* monotonic wall-clock time in ns */

static inline float *demo_row_f32(const struct demo_tensor *t, int64_t r) {
    return (float *)((char *)t->data + (size_t)r * t->nb1);
}

static inline const block_q8_0 *demo_row_q8_0(const struct demo_tensor *t, int64_t r) {
    return (const block_q8_0 *)((const char *)t->data + (size_t)r * t->nb1);
}

/* quant.c: the Q8_0 format's definition, shared by every backend and the reference. */
void quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n);
void dequantize_row_q8_0(const block_q8_0 *x, float *y, int64_t n);

#endif /* DEMO_H */
