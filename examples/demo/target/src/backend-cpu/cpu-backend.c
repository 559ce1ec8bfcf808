/* The CPU backend: walks the graph node by node and dispatches to the kernels in ops-*.c.
 *
 * Fusions: MUL_MAT followed by ADD of a bias row is computed in one kernel (the bias is added
 * as each output row is finished). Other ops run one node at a time. */
#include "cpu-ops.h"

#include <stdio.h>
#include <stdlib.h>

/* The bias of a MUL_MAT+ADD pair: the ADD operand that is not the MUL_MAT result, if it is a
 * single row the fused kernel can broadcast. */
static const struct demo_tensor *fusable_bias(const struct demo_tensor *mm,
                                              const struct demo_tensor *add) {
    const struct demo_tensor *bias = add->src[0] == mm ? add->src[1] : add->src[0];
    return bias->ne[1] == 1 && bias->ne[0] == add->ne[0] ? bias : NULL;
}

static void cpu_compute_node(struct demo_tensor *node) {
    switch (node->op) {
    case OP_ADD:
        cpu_add(node);
        break;
    case OP_MUL:
        cpu_mul(node);
        break;
    case OP_RMS_NORM:
        cpu_rms_norm(node);
        break;
    case OP_GET_ROWS:
        cpu_get_rows(node);
        break;
    case OP_MUL_MAT:
        cpu_mul_mat_q8_0(node, node->src[0], node->src[1], NULL);
        break;
    case OP_SOFT_MAX:
        cpu_soft_max(node);
        break;
    default:
        fprintf(stderr, "cpu backend: unsupported op %s\n", demo_op_name(node->op));
        exit(2);
    }
}

/* Runs nodes i, i+1, ... as one fused kernel when it can; returns how many nodes it ran. */
static int cpu_compute_fused(struct demo_graph *graph, int i) {
    struct demo_tensor *node = graph->nodes[i];

    if (demo_can_fuse(graph, i, (enum demo_op[]){OP_MUL_MAT, OP_ADD}, 2)) {
        struct demo_tensor *add = graph->nodes[i + 1];
        const struct demo_tensor *bias = fusable_bias(node, add);
        if (bias != NULL) {
            cpu_mul_mat_q8_0(add, node->src[0], node->src[1], bias);
            return 2;
        }
    }

    cpu_compute_node(node);
    return 1;
}

static void cpu_graph_compute(struct demo_graph *graph, struct demo_profile *prof) {
    for (int i = 0; i < graph->n_nodes;) {
        const int64_t t0 = demo_time_ns();
        const int n_run = cpu_compute_fused(graph, i);
        if (prof != NULL) {
            prof->op_ns[graph->nodes[i]->op] += demo_time_ns() - t0;
        }
        i += n_run;
    }
}

const struct demo_backend demo_backend_cpu = {"cpu", cpu_graph_compute};
