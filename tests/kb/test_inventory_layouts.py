"""The inventory on real layouts and traps, each on a small tree written here: backends in files (the
old llama.cpp layout, ik_llama.cpp), a config mapping for an unusual tree, chains kept whole, dead
branches, table-driven registries, wrappers defined in another file, and what it cannot classify."""

from __future__ import annotations

from pathlib import Path

from kb.config import InventorySettings
from kb.inventory import Inventory, scan_path

SETTINGS = InventorySettings()


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def cells(inv: Inventory) -> set[tuple[str, str]]:
    return {(f.backend, f.key) for f in inv.fusions}


# A CPU compute loop the old way: under `case OP:`, the next nodes checked by hand.
CPU_COMPUTE = """
static void ggml_graph_compute_thread(struct ggml_cgraph * cgraph, int fusion) {
    for (int i = 0; i < cgraph->n_nodes; ++i) {
        struct ggml_tensor * tensor = cgraph->nodes[i];
        switch (tensor->op) {
            case GGML_OP_RMS_NORM:
                if (fusion && i + 1 < cgraph->n_nodes && cgraph->nodes[i+1]->op == GGML_OP_MUL) {
                    ggml_compute_forward_rms_norm_mul(tensor, cgraph->nodes[i+1]);
                    ++i;
                } else {
                    ggml_compute_forward_rms_norm(tensor);
                }
                break;
            case GGML_OP_SOFT_MAX:
                if (fusion && i + 4 < cgraph->n_nodes &&
                    cgraph->nodes[i+1]->op == GGML_OP_RESHAPE  &&
                    cgraph->nodes[i+2]->op == GGML_OP_ARGSORT  &&
                    cgraph->nodes[i+3]->op == GGML_OP_VIEW     &&
                    cgraph->nodes[i+4]->op == GGML_OP_GET_ROWS) {
                    iqk_topk_moe(tensor, cgraph->nodes[i+4]);
                    i += 4;
                } else if (fusion && i + 2 < cgraph->n_nodes &&
                    cgraph->nodes[i+1]->op == GGML_OP_SCALE &&
                    cgraph->nodes[i+2]->op == GGML_OP_ADD) {
                    softmax_scale_add(tensor);
                    i += 2;
                } else {
                    ggml_compute_forward_soft_max(tensor);
                }
                break;
            case GGML_OP_ARGSORT:
                if (false && i + 5 < cgraph->n_nodes &&
                    cgraph->nodes[i+1]->op == GGML_OP_VIEW &&
                    cgraph->nodes[i+2]->op == GGML_OP_GET_ROWS) {
                    never_runs(tensor);
                }
                break;
            case GGML_OP_UNARY:
                switch (ggml_get_unary_op(tensor)) {
                    case GGML_UNARY_OP_SIGMOID:
                        if (fusion && cgraph->nodes[i+1]->op == GGML_OP_RESHAPE &&
                            cgraph->nodes[i+2]->op == GGML_OP_ADD) {
                            biased_sigmoid(tensor);
                            i += 2;
                        }
                        break;
                    default:
                        break;
                }
                break;
            case GGML_OP_MUL:
                if (fusion && cgraph->nodes[i+1]->op == GGML_OP_UNARY &&
                    (ggml_unary_op)cgraph->nodes[i+1]->op_params[0] == GGML_UNARY_OP_EXP &&
                    cgraph->nodes[i+2]->op == GGML_OP_MUL) {
                    mul_exp_mul(tensor);
                    i += 2;
                } else if (fusion && cgraph->nodes[i+1]->op == GGML_OP_ADD &&
                           cgraph->nodes[i+3]->op == GGML_OP_ADD) {
                    skips_a_node(tensor);
                }
                break;
            default:
                break;
        }
    }
}
"""

CUDA_FUSE = """
static void ggml_cuda_graph_compute(ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (ggml_can_fuse(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL, GGML_OP_ADD })) {
            i += 2;
            continue;
        }
        if (ggml_can_fuse(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) {
            i += 1;
        }
    }
}
"""


def test_old_layout_backends_are_files_and_the_cpu_is_ggml_c(tmp_path: Path) -> None:
    """llama.cpp before its 2024 reorganisation: ggml.c holds the CPU backend, ggml-metal.m and
    ggml-cuda.cu (next to its ggml-cuda/ kernels) are backends of their own."""
    root = write(
        tmp_path / "old",
        {
            "ggml/src/ggml.c": CPU_COMPUTE,
            "ggml/src/ggml-quants.c": "void quantize_row_q4_0(void) {}\n",
            "ggml/src/ggml-cuda.cu": CUDA_FUSE,
            "ggml/src/ggml-cuda/norm.cu": "__global__ void rms_norm_f32(void) {}\n",
            "ggml/src/ggml-metal.m": """
static void ggml_metal_encode(struct ggml_cgraph * gf) {
    for (int i = 0; i < gf->n_nodes; ++i) {
        switch (gf->nodes[i]->op) {
            case GGML_OP_RMS_NORM:
                if (gf->nodes[i+1]->op == GGML_OP_MUL) { i++; }
                break;
            default: break;
        }
    }
}
""",
            "ggml/src/ggml-alloc.c": "void ggml_gallocr_alloc_graph(void) {}\n",
            "ggml/src/ggml-backend.c": "void ggml_backend_graph_compute(void) {}\n",
            "ggml/src/ggml-impl.h": "#pragma once\n",
        },
    )
    inv = scan_path(root, SETTINGS)
    assert inv.backends == ["cpu", "cuda", "metal"]  # alloc, backend, impl are shared code
    assert inv.layout["cpu"].startswith("CPU files of the old layout")
    assert inv.layout["metal"] == "files ggml-metal.m" and inv.layout["cuda"] == "folder ggml/src/ggml-cuda/"
    assert {"ggml/src/ggml-cuda.cu"} <= {f.file for f in inv.fusions if f.backend == "cuda"}
    assert ("cpu", "RMS_NORM+MUL") in cells(inv) and ("metal", "RMS_NORM+MUL") in cells(inv)
    gap = next(g for g in inv.gaps if g.key == "RMS_NORM+MUL+ADD")
    assert gap.target_missing and set(gap.missing) == {"cpu", "metal"}


def test_the_oldest_layout_at_the_top_of_the_tree(tmp_path: Path) -> None:
    root = write(
        tmp_path / "oldest", {"ggml.c": CPU_COMPUTE, "ggml-cuda.cu": CUDA_FUSE, "llama.cpp": "int x;\n"}
    )
    inv = scan_path(root, SETTINGS)
    assert inv.backends == ["cpu", "cuda"] and ("cpu", "RMS_NORM+MUL") in cells(inv)


def test_ik_layout_cpu_kernels_in_iqk(tmp_path: Path) -> None:
    root = write(
        tmp_path / "ik",
        {
            "ggml/src/ggml.c": "void ggml_compute_forward(void) {}\n",
            "ggml/src/iqk/iqk_fused.cpp": """
bool iqk_try_fuse(const ggml_cgraph * cgraph, int i) {
    return ggml_can_fuse(cgraph, i, { GGML_OP_MUL_MAT, GGML_OP_ADD });
}
""",
            "ggml/src/ggml-cuda.cu": CUDA_FUSE,
            "ggml/src/ggml-cuda/fa.cu": "__global__ void fa(void) {}\n",
            "ggml/src/ggml-vulkan.cpp": "static void vk(void) {}\n",
        },
    )
    inv = scan_path(root, SETTINGS)
    assert inv.backends == ["cpu", "cuda", "vulkan"]
    assert ("cpu", "MUL_MAT+ADD") in cells(inv)
    assert next(f for f in inv.fusions if f.backend == "cpu").file == "ggml/src/iqk/iqk_fused.cpp"


def test_config_maps_an_unusual_tree(tmp_path: Path) -> None:
    root = write(
        tmp_path / "odd",
        {
            "engine/kernels/cpu_ops.c": CPU_COMPUTE,
            "engine/gpu/driver.cu": CUDA_FUSE,
            "engine/common.h": "#pragma once\n",
        },
    )
    settings = InventorySettings(backend_paths={"cpu": ["engine/kernels/"], "cuda": ["engine/gpu/*.cu"]})
    inv = scan_path(root, settings)
    assert inv.backends == ["cpu", "cuda"] and inv.layout["cpu"] == "kb.inventory.backend_paths"
    assert ("cpu", "RMS_NORM+MUL") in cells(inv) and ("cuda", "RMS_NORM+MUL+ADD") in cells(inv)


def test_chains_are_kept_whole_and_dead_branches_left_out(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {"ggml/src/ggml.c": CPU_COMPUTE})
    inv = scan_path(root, SETTINGS)
    by_key = {f.key: f for f in inv.fusions}
    chain = by_key["SOFT_MAX+ARGSORT+GET_ROWS"]
    assert chain.raw_ops == ("SOFT_MAX", "RESHAPE", "ARGSORT", "VIEW", "GET_ROWS")  # not cut at two
    assert "SOFT_MAX+SCALE+ADD" in by_key  # the `else if` is a chain of its own
    assert "UNARY:SIGMOID+ADD" in by_key  # the kind of node i, from the inner case label
    assert "MUL+UNARY:EXP+MUL" in by_key  # the kind of node i+1, from its op_params
    assert "ARGSORT+GET_ROWS" not in by_key
    assert any("dead code" in e.why and e.line > 0 for e in inv.excluded)
    (skipping,) = [u for u in inv.unclassified if "skips node i+2" in u.why]
    assert skipping.backend == "cpu" and "skips_a_node" not in skipping.snippet


def test_dead_calls_and_a_wrapper_that_never_fuses(tmp_path: Path) -> None:
    root = write(
        tmp_path / "t",
        {
            "ggml/src/ggml-cuda/ggml-cuda.cu": """
static bool ggml_cuda_can_fuse_off(const ggml_cgraph * cgraph, int i,
                                   std::initializer_list<enum ggml_op> ops) {
    //if (!ggml_can_fuse(cgraph, i, ops)) {
        return false;
    //}
    return true;
}
static void compute(ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (false && ggml_can_fuse(cgraph, i, { GGML_OP_ADD, GGML_OP_RMS_NORM })) { i++; }
        if (0 && ggml_can_fuse(cgraph, i, { GGML_OP_MUL, GGML_OP_ADD })) { i++; }
        if (ggml_cuda_can_fuse_off(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) { i++; }
        if (ggml_can_fuse(cgraph, i, { GGML_OP_SCALE, GGML_OP_ADD })) { i++; }
    }
}
""",
        },
    )
    inv = scan_path(root, SETTINGS)
    assert cells(inv) == {("cuda", "SCALE+ADD")}
    reasons = [e.why for e in inv.excluded]
    assert sum("dead code" in r for r in reasons) == 2
    assert any("ggml_cuda_can_fuse_off() returns false before any check" in r for r in reasons)


REGISTRY = """
#include <vector>
static const std::vector<ggml_op> rms_norm_mul = { GGML_OP_RMS_NORM, GGML_OP_MUL };
static const std::vector<ggml_op> add_rms_norm = { GGML_OP_ADD, GGML_OP_RMS_NORM };
static const std::vector<ggml_op> mul_mat_add_add = { GGML_OP_MUL_MAT, GGML_OP_ADD, GGML_OP_ADD };

struct fusion_entry { const char * name; const std::vector<ggml_op> * ops; int kernel; };
static const fusion_entry fusion_table[] = {
    { "rms_norm_mul", &rms_norm_mul, 1 },
    { "add_rms_norm", &add_rms_norm, 2 },
};

static int find_fusion(const ggml_cgraph * cgraph, int i) {
    for (const auto & entry : fusion_table) {
        if (ggml_can_fuse(cgraph, i, entry.ops->data(), (int) entry.ops->size())) {
            return entry.kernel;
        }
    }
    for (const auto * ops : { &mul_mat_add_add }) {
        if (ggml_can_fuse(cgraph, i, ops->data(), (int) ops->size())) {
            return 3;
        }
    }
    return 0;
}
"""

REGISTRY_BY_HAND = """
static const std::vector<std::pair<const char *, std::vector<ggml_op>>> patterns = {
    { "gelu_mul", { GGML_OP_UNARY, GGML_OP_MUL } },
    { "scale_add", { GGML_OP_SCALE, GGML_OP_ADD } },
};

static int match_patterns(const ggml_cgraph * cgraph, int i) {
    for (const auto & [name, ops] : patterns) {
        bool ok = i + (int) ops.size() <= cgraph->n_nodes;
        for (size_t k = 0; ok && k < ops.size(); ++k) {
            ok = cgraph->nodes[i + k]->op == ops[k];
        }
        if (ok) {
            return 1;
        }
    }
    return 0;
}
"""


def test_table_driven_registries(tmp_path: Path) -> None:
    root = write(
        tmp_path / "t",
        {"ggml/src/ggml-vulkan/fusions.cpp": REGISTRY, "ggml/src/ggml-metal/patterns.cpp": REGISTRY_BY_HAND},
    )
    inv = scan_path(root, SETTINGS)
    assert {k for b, k in cells(inv) if b == "vulkan"} == {"RMS_NORM+MUL", "ADD+RMS_NORM", "MUL_MAT+ADD+ADD"}
    assert {k for b, k in cells(inv) if b == "metal"} == {"UNARY+MUL", "SCALE+ADD"}
    vulkan = {f.key: f for f in inv.fusions if f.backend == "vulkan"}
    assert vulkan["RMS_NORM+MUL"].line == 9  # the table row that registers it
    assert not [u for u in inv.unclassified if u.backend in ("vulkan", "metal")]


def test_wrappers_defined_in_another_file(tmp_path: Path) -> None:
    root = write(
        tmp_path / "t",
        {
            "ggml/src/ggml-fusion.h": """
#pragma once
static inline bool ggml_backend_can_fuse_chain(const ggml_cgraph * g, int i,
                                               std::initializer_list<ggml_op> ops) {
    return ggml_can_fuse(g, i, ops);
}
""",
            "ggml/src/ggml-sycl/fusion.hpp": (
                "bool ggml_sycl_can_fuse(const ggml_cgraph * cgraph, int node_idx,\n"
                "                        std::initializer_list<enum ggml_op> ops);\n"
            ),
            "ggml/src/ggml-sycl/fusion.cpp": """
bool ggml_sycl_can_fuse(const ggml_cgraph * cgraph, int node_idx, std::initializer_list<enum ggml_op> ops) {
    if (!ggml_can_fuse(cgraph, node_idx, ops)) {
        return false;
    }
    return true;
}
""",
            "ggml/src/ggml-sycl/ggml-sycl.cpp": """
static void compute(ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (ggml_sycl_can_fuse(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) { i++; }
        if (ggml_backend_can_fuse_chain(cgraph, i, { GGML_OP_ADD, GGML_OP_ADD })) { i++; }
    }
}
""",
            "ggml/src/ggml-opencl/context.cpp": """
bool opencl_context::can_fuse(int i, std::initializer_list<ggml_op> ops) const {
    return ggml_can_fuse(graph, i, ops);
}
""",
            "ggml/src/ggml-opencl/ggml-opencl.cpp": """
static void compute(opencl_context * ctx, ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (ctx->can_fuse(i, { GGML_OP_MUL_MAT, GGML_OP_ADD })) { i++; }
    }
}
""",
        },
    )
    inv = scan_path(root, SETTINGS)
    assert {k for b, k in cells(inv) if b == "sycl"} == {"RMS_NORM+MUL", "ADD+ADD"}
    assert {k for b, k in cells(inv) if b == "opencl"} == {"MUL_MAT+ADD"}
    sycl = {f.key: f for f in inv.fusions if f.backend == "sycl"}
    assert sycl["RMS_NORM+MUL"].file == "ggml/src/ggml-sycl/ggml-sycl.cpp"


def test_what_cannot_be_classified_is_reported_with_the_reason(tmp_path: Path) -> None:
    root = write(
        tmp_path / "t",
        {
            "ggml/src/ggml-webgpu/ggml-webgpu.cpp": """
static bool ggml_webgpu_can_fuse_by_hand(const ggml_cgraph * cgraph, int i,
                                         std::initializer_list<ggml_op> ops) {
    return cgraph->nodes[i]->type == GGML_TYPE_F32;
}
static void compute(ggml_cgraph * cgraph, ggml_op runtime_op) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (ggml_webgpu_can_fuse_elsewhere(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })) { i++; }
        if (ggml_webgpu_can_fuse_by_hand(cgraph, i, { GGML_OP_ADD, GGML_OP_MUL })) { i++; }
        if (ggml_can_fuse(cgraph, i, { runtime_op, GGML_OP_ADD })) { i++; }
    }
}
""",
        },
    )
    inv = scan_path(root, SETTINGS)
    assert cells(inv) == set()
    reasons = {u.why for u in inv.unclassified}
    assert any(
        "ggml_webgpu_can_fuse_elsewhere() is not defined in this backend or a shared file" in r
        for r in reasons
    )
    assert any(
        "ggml_webgpu_can_fuse_by_hand() checks fusions without a fusion predicate" in r for r in reasons
    )
    assert any("runtime_op is only known at run time" in r for r in reasons)
    assert all(u.backend == "webgpu" and u.line > 0 and u.snippet for u in inv.unclassified)
