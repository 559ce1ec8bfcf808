"""Backend fusion inventory: every shape of fusion check on small ggml-like trees written here, a tree
shaped like the bundled demo read through config rules, storage in a real workspace database, the
bad-input contract, and (with AUTORESEARCH_LLAMACPP=1, or AUTORESEARCH_LLAMACPP_SRC at a llama.cpp
tree) recall against the hand-checked list in tests/fixtures/llamacpp_fusions.json."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.config import InventoryRule, InventorySettings
from kb.errors import UserError
from kb.inventory import Inventory, scan_path
from kb.inventory.model import DEFAULT_VIEW_OPS, normalise
from runner.demo import DEMO_INVENTORY
from tests.conftest import make_repo
from tui.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "llamacpp_fusions.json"

# A ggml-like tree: each backend hides its fusions in a different shape, with look-alikes around.
GGML_TREE: dict[str, str] = {
    "ggml/src/ggml-impl.h": """
#pragma once
// shared by every backend: a named list in a header outside the backend folders
static const enum ggml_op ggml_snake_ops[] = {
    GGML_OP_MUL, GGML_OP_SIN, GGML_OP_SQR,
    GGML_OP_MUL, GGML_OP_ADD,
};
""",
    "ggml/src/ggml-cpu/ggml-cpu.c": """
#include "ggml-impl.h"
// ggml_can_fuse(cgraph, i, { GGML_OP_MUL_MAT, GGML_OP_ADD }) would be nice here one day
static const char * hint = "ggml_can_fuse(cgraph, i, { GGML_OP_SCALE, GGML_OP_ADD })";

static int ggml_cpu_try_fuse_ops(const struct ggml_cgraph * cgraph, int node_n) {
    struct ggml_tensor * node = cgraph->nodes[node_n];
    if (node->op == GGML_OP_RMS_NORM) {
        const enum ggml_op fuse_ops[] = { GGML_OP_RMS_NORM, GGML_OP_MUL };
        if (ggml_can_fuse(cgraph, node_n, fuse_ops, 2)) {
            return 1;
        }
    }
#if 0
    if (ggml_can_fuse(cgraph, node_n, { GGML_OP_ADD, GGML_OP_ADD })) {
        return 1;
    }
#endif
    return 0;
}

static void ggml_cpu_graph_optimize(struct ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (ggml_can_fuse(cgraph, i, { GGML_OP_NORM, GGML_OP_MUL })) {
            keep_together(cgraph, i);
        }
    }
}

static void ggml_compute_forward(struct ggml_tensor * node) {
    switch (node->op) {
        case GGML_OP_SOFT_MAX:
            ggml_compute_forward_soft_max(node);
            break;
        case GGML_OP_GLU:
            ggml_compute_forward_glu(node);
            break;
        default:
            break;
    }
}
""",
    "ggml/src/ggml-cuda/ggml-cuda.cu": """
static bool ggml_cuda_can_fuse(const struct ggml_cgraph * cgraph, int node_idx,
                               std::initializer_list<enum ggml_op> ops,
                               std::initializer_list<enum ggml_unary_op> unary_ops) {
    if (!ggml_can_fuse(cgraph, node_idx, ops)) {
        return false;
    }
    return true;
}

static int ggml_cuda_try_gdn_fusion(const ggml_cgraph * cgraph, int node_idx) {
    const ggml_tensor * gdn = cgraph->nodes[node_idx];
    if (gdn->op != GGML_OP_GATED_DELTA_NET) {
        return 0;
    }
    for (int j = node_idx + 1; j < cgraph->n_nodes; ++j) {
        if (cgraph->nodes[j]->op != GGML_OP_CPY) {
            return 0;
        }
    }
    return 1;
}

static int ggml_cuda_try_fuse(ggml_cgraph * cgraph, int i, bool sigmoid) {
    ggml_tensor * node = cgraph->nodes[i];
    if (ggml_cuda_can_fuse(cgraph, i, { GGML_OP_RMS_NORM,
                                        GGML_OP_MUL,
                                        GGML_OP_ADD }, {})) {
        return 2;
    }
    if (ggml_cuda_can_fuse(cgraph, i, { GGML_OP_UNARY, GGML_OP_MUL }, { GGML_UNARY_OP_SILU })) {
        return 1;
    }
    for (ggml_op op : { GGML_OP_MUL_MAT, GGML_OP_MUL_MAT_ID }) {
        const ggml_op bias_op = op == GGML_OP_MUL_MAT ? GGML_OP_ADD : GGML_OP_ADD_ID;
        if (ggml_can_fuse(cgraph, i, { op, bias_op })) {
            return 1;
        }
    }
    if (node->op == GGML_OP_SOFT_MAX || node->op == GGML_OP_UNARY) {
        std::vector<ggml_op> ops;
        if (sigmoid) {
            ops.insert(ops.end(), { GGML_OP_UNARY });
        } else {
            ops.insert(ops.end(), { GGML_OP_SOFT_MAX });
        }
        ops.insert(ops.end(), { GGML_OP_RESHAPE, GGML_OP_ARGSORT, GGML_OP_VIEW, GGML_OP_GET_ROWS });
        int out_nodes[2] = { i + 3, i + 4 };
        if (ggml_can_fuse_subgraph(cgraph, i, ops.size(), ops.data(), out_nodes, 2)) {
            if (ggml_can_fuse_subgraph(cgraph, i + ctx->n_fused, { GGML_OP_DIV, GGML_OP_SCALE }, { i })) {
                return 5;
            }
            return (int) ops.size() - 1;
        }
    }
    if (node->op == GGML_OP_ADD || node->op == GGML_OP_MUL) {
        ggml_op ops[8];
        std::fill(ops, ops + 8, node->op);
        int n_fuse = 0;
        for (; n_fuse < 6; ++n_fuse) {
            if (!ggml_can_fuse(cgraph, i + n_fuse, ops + n_fuse, 2)) {
                break;
            }
        }
        if (n_fuse > 0) {
            return n_fuse;
        }
    }
    {
        std::vector<ggml_op> seen(4, GGML_OP_VIEW);
        for (int k = 0; k < 4; ++k) {
            seen[k] = cgraph->nodes[i + k]->op;
        }
        if (ggml_can_fuse(cgraph, i, seen.data(), 4)) {
            return 3;
        }
    }
    return 0;
}
""",
    "ggml/src/ggml-metal/ggml-metal-fusion.cpp": """
static const std::vector<ggml_op> ops_norm_mul = { GGML_OP_NORM, GGML_OP_MUL };
static const std::vector<ggml_op> ops_add_3    = { GGML_OP_ADD, GGML_OP_ADD, GGML_OP_ADD };
static const std::vector<ggml_op> ops_ssm_silu = { GGML_OP_SSM_CONV, GGML_OP_UNARY };

static bool ggml_metal_check_ssm(const ggml_tensor * un) {
    return ggml_get_unary_op(un) == GGML_UNARY_OP_SILU;
}

struct ggml_metal_fusion {
    int id;
    std::vector<ggml_op> ops;
    bool (*check)(const ggml_tensor *);
};

static const std::vector<ggml_metal_fusion> ggml_metal_fusions = {
    { 1, ops_norm_mul, nullptr },
    { 2, ops_add_3,    nullptr },
    { 3, ops_ssm_silu, ggml_metal_check_ssm },
    { 4, { GGML_OP_RMS_NORM, GGML_OP_MUL }, nullptr },
};

const ggml_metal_fusion * ggml_metal_fusion_next(const ggml_cgraph * gf, int idx) {
    for (const ggml_metal_fusion & fusion : ggml_metal_fusions) {
        if (ggml_can_fuse(gf, idx, fusion.ops.data(), (int) fusion.ops.size())) {
            return &fusion;
        }
    }
    return nullptr;
}
""",
    "ggml/src/ggml-vulkan/ggml-vulkan-types.h": """
static constexpr std::initializer_list<ggml_op> rms_norm_mul_add_pattern { GGML_OP_RMS_NORM, GGML_OP_MUL,
                                                                           GGML_OP_ADD };
""",
    "ggml/src/ggml-vulkan/ggml-vulkan.cpp": """
#include "ggml-vulkan-types.h"
bool ggml_vk_can_fuse(const ggml_backend_vk_context * ctx, const struct ggml_cgraph * cgraph, int node_idx,
                      std::initializer_list<enum ggml_op> ops) {
    return ggml_can_fuse(cgraph, node_idx, ops);
}

static bool ggml_vk_match_ops(const struct ggml_cgraph * cgraph, int node_idx,
                              const std::initializer_list<ggml_op> & ops) {
    for (size_t j = 0; j < ops.size(); ++j) {
        if (cgraph->nodes[node_idx + j]->op != ops.begin()[j]) {
            return false;
        }
    }
    return true;
}

static void ggml_vk_graph_compute(ggml_backend_vk_context * ctx, ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        if (ggml_vk_can_fuse(ctx, cgraph, i, rms_norm_mul_add_pattern)) {
            i += 2;
        } else if (ggml_vk_match_ops(cgraph, i, { GGML_OP_GET_ROWS, GGML_OP_ADD, GGML_OP_TOP_K })) {
            i += 2;
        } else if (ggml_can_fuse(cgraph, i, ggml_snake_ops, 5)) {
            i += 4;
        }
    }
}

void ggml_vk_graph_optimize(ggml_backend_t backend, struct ggml_cgraph * graph) {
    const ggml_op ops[] = { GGML_OP_ROPE, GGML_OP_VIEW, GGML_OP_SET_ROWS };
    bool can_pull = ggml_can_fuse(graph, 0, ops, 3);
}
""",
    "ggml/src/ggml-sycl/ggml-sycl.cpp": """
static void ggml_sycl_graph_compute(ggml_cgraph * cgraph) {
    for (int i = 0; i < cgraph->n_nodes; i++) {
        ggml_tensor * node = cgraph->nodes[i];
        switch (node->op) {
            case GGML_OP_RMS_NORM:
                if (i + 1 < cgraph->n_nodes && cgraph->nodes[i + 1]->op == GGML_OP_MUL) {
                    ggml_sycl_rms_norm_mul(node, cgraph->nodes[i + 1]);
                    i++;
                    break;
                }
                ggml_sycl_rms_norm(node);
                break;
            case GGML_OP_ADD: {
                const ggml_tensor * next = cgraph->nodes[i + 1];
                if (next->op == GGML_OP_ADD && next->src[0] == node) {
                    ggml_sycl_add_add(node, next);
                    i++;
                    break;
                }
                ggml_sycl_add(node);
                break;
            }
            case GGML_OP_UNARY:
                if (ggml_get_unary_op(node) == GGML_UNARY_OP_GELU ||
                    ggml_get_unary_op(node) == GGML_UNARY_OP_SILU) {
                    if (ggml_can_fuse(cgraph, i, { GGML_OP_UNARY, GGML_OP_MUL })) {
                        i++;
                    }
                }
                break;
            default:
                break;
        }
    }
}
""",
    "ggml/src/ggml-hip/CMakeLists.txt": "# builds ../ggml-cuda sources\n",
    "ggml/src/ggml.c": "int ggml_dummy;\n",
}

# What GGML_TREE really fuses, by backend (read from the sources above).
EXPECTED: dict[str, set[str]] = {
    "cpu": {"RMS_NORM+MUL"},
    "cuda": {
        "RMS_NORM+MUL+ADD",
        "UNARY:SILU+MUL",
        "MUL_MAT+ADD",
        "MUL_MAT_ID+ADD_ID",
        "SOFT_MAX+ARGSORT+GET_ROWS",
        "UNARY+ARGSORT+GET_ROWS",
        "ADD+ADD",
        "MUL+MUL",
    },
    "metal": {"NORM+MUL", "ADD+ADD", "SSM_CONV+UNARY:SILU", "RMS_NORM+MUL"},
    "vulkan": {"RMS_NORM+MUL+ADD", "GET_ROWS+ADD+TOP_K", "MUL+SIN+SQR+MUL+ADD"},
    "sycl": {"RMS_NORM+MUL", "UNARY+MUL", "ADD+ADD"},
}

# The bundled demo's shape (src/backend-<name>/, demo_can_fuse with compound literals, OP_ prefix).
DEMO_TREE: dict[str, str] = {
    "include/demo.h": "enum demo_op { OP_NONE, OP_ADD, OP_MUL, OP_RMS_NORM, OP_MUL_MAT, OP_SOFT_MAX };\n",
    "src/graph.c": """
bool demo_can_fuse(const struct demo_graph *graph, int i, const enum demo_op *ops, int n_ops) {
    for (int k = 0; k < n_ops; k++) {
        if (graph->nodes[i + k]->op != ops[k]) return false;
    }
    return true;
}
""",
    "src/backend-cpu/cpu-backend.c": """
/* Fusions: MUL_MAT followed by ADD of a bias row. demo_can_fuse(graph, i, {OP_RMS_NORM, OP_MUL}) is not. */
static void cpu_compute_node(struct demo_tensor *node) {
    switch (node->op) {
    case OP_ADD: cpu_add(node); break;
    case OP_SOFT_MAX: cpu_soft_max(node); break;
    default: break;
    }
}
static int cpu_compute_fused(struct demo_graph *graph, int i) {
    if (demo_can_fuse(graph, i, (enum demo_op[]){OP_MUL_MAT, OP_ADD}, 2)) {
        return 2;
    }
    cpu_compute_node(graph->nodes[i]);
    return 1;
}
""",
    "src/backend-accel/accel-backend.c": """
static void accel_graph_compute(struct demo_graph *graph) {
    for (int i = 0; i < graph->n_nodes; i++) {
        if (demo_can_fuse(graph, i, (enum demo_op[]){OP_RMS_NORM, OP_MUL}, 2) && is_row(graph, i)) {
            i += 1;
        } else if (demo_can_fuse(graph, i, (enum demo_op[]){OP_MUL_MAT,
                                                              OP_ADD}, 2)) {
            i += 1;
        } else {
            switch (graph->nodes[i]->op) {
            case OP_SOFT_MAX: accel_soft_max(graph->nodes[i]); break;
            default: break;
            }
        }
    }
}
""",
}

DEMO_SETTINGS = InventorySettings(
    backends_root="src",
    backend_dir_pattern=r"backend-(?P<name>[\w-]+)",
    rules=[InventoryRule(call=["demo_can_fuse"], op_prefix="OP_")],
)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def cells(inv: Inventory) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in inv.fusions:
        out.setdefault(f.backend, set()).add(f.key)
    return out


@pytest.fixture
def ggml_tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "llama", GGML_TREE)


def test_every_shape_is_found_and_look_alikes_are_not(ggml_tree: Path) -> None:
    inv = scan_path(ggml_tree, InventorySettings())
    assert inv.backends == ["cpu", "cuda", "metal", "sycl", "vulkan"]  # ggml-hip has no sources
    assert cells(inv) == EXPECTED
    cpu = next(f for f in inv.fusions if f.backend == "cpu")
    assert cpu.file == "ggml/src/ggml-cpu/ggml-cpu.c"
    assert (
        cpu.line
        == GGML_TREE["ggml/src/ggml-cpu/ggml-cpu.c"]
        .splitlines()
        .index("        if (ggml_can_fuse(cgraph, node_n, fuse_ops, 2)) {")
        + 1
    )
    metal_row = next(f for f in inv.fusions if f.backend == "metal" and f.key == "NORM+MUL")
    assert "{ 1, ops_norm_mul, nullptr }" in metal_row.snippet  # evidence points at the table row
    vulkan = {f.key: f for f in inv.fusions if f.backend == "vulkan"}
    assert "ggml-vulkan-types.h" in vulkan["RMS_NORM+MUL+ADD"].how
    assert "ggml-impl.h" in vulkan["MUL+SIN+SQR+MUL+ADD"].how


def test_unresolvable_checks_are_reported_not_guessed(ggml_tree: Path) -> None:
    inv = scan_path(ggml_tree, InventorySettings())
    why = {(u.backend, u.file.rsplit("/", 1)[-1], u.why.split(":")[0]) for u in inv.unclassified}
    reasons = " | ".join(u.why for u in inv.unclassified)
    assert ("cuda", "ggml-cuda.cu", "starts at i + ctx->n_fused") in why  # a continuation, not a fusion
    assert "cgraph->nodes[i + k]->op is only known at run time" in reasons
    assert "ggml_cuda_try_gdn_fusion() matches nodes by hand (GATED_DELTA_NET, CPY)" in reasons
    assert all(u.snippet and u.line > 0 for u in inv.unclassified)
    excluded = " | ".join(u.why for u in inv.excluded)
    assert "ggml_cpu_graph_optimize(), which only reorders the graph" in excluded
    assert "ggml_vk_graph_optimize(), which only reorders the graph" in excluded
    found = {k for keys in cells(inv).values() for k in keys}
    assert not found & {"NORM+MUL+ADD", "MUL_MAT+ADD+SCALE", "SCALE+ADD", "DIV+SCALE", "ROPE+SET_ROWS"}
    assert "NORM+MUL" not in cells(inv)["cpu"]


def test_gaps_put_the_target_backend_first(ggml_tree: Path) -> None:
    inv = scan_path(ggml_tree, InventorySettings(target_backend="cpu"))
    assert inv.gaps
    first_non_target = next(i for i, g in enumerate(inv.gaps) if not g.target_missing)
    assert all(g.target_missing for g in inv.gaps[:first_non_target])
    assert not any(g.target_missing for g in inv.gaps[first_non_target:])
    gaps = {g.key: g for g in inv.gaps}
    assert gaps["RMS_NORM+MUL+ADD"].present == ("cuda", "vulkan")
    assert "cpu" in gaps["RMS_NORM+MUL+ADD"].missing and gaps["RMS_NORM+MUL+ADD"].target_missing
    assert gaps["RMS_NORM+MUL"].present == ("cpu", "metal", "sycl")
    assert not gaps["RMS_NORM+MUL"].target_missing
    # sycl fuses UNARY+MUL for a run-time kind: it is not counted as missing UNARY:SILU+MUL
    assert "sycl" not in gaps["UNARY:SILU+MUL"].missing
    # single ops fused by construction are listed apart and never gaps
    assert {(s.backend, s.op) for s in inv.singles} >= {("cpu", "SOFT_MAX"), ("cpu", "GLU")}
    assert not any(g.key in ("SOFT_MAX", "GLU") for g in inv.gaps)
    # the target backend can be changed
    other = scan_path(ggml_tree, InventorySettings(target_backend="metal"))
    assert other.gaps[0].target_missing and "metal" in other.gaps[0].missing


def test_config_rules_read_a_demo_shaped_tree(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "demo", DEMO_TREE)
    inv = scan_path(tree, DEMO_SETTINGS)
    assert inv.backends == ["accel", "cpu"]
    assert cells(inv) == {"accel": {"RMS_NORM+MUL", "MUL_MAT+ADD"}, "cpu": {"MUL_MAT+ADD"}}
    assert [(g.key, g.present, g.missing) for g in inv.gaps] == [("RMS_NORM+MUL", ("accel",), ("cpu",))]
    assert {(s.backend, s.op) for s in inv.singles} == {("accel", "SOFT_MAX"), ("cpu", "SOFT_MAX")}
    # without the rules the same tree has no recognisable backends
    with pytest.raises(UserError, match=f"^{re.escape(str(tree.resolve()))}: no recognisable backends"):
        scan_path(tree, InventorySettings())


DEMO_CONFIG = {"kb": {"inventory": DEMO_INVENTORY}}


def test_workspace_config_rules_survive_the_toml_round_trip(tmp_path: Path) -> None:
    from kb.init import TargetSpec, create_workspace

    target = make_repo(tmp_path / "demo", DEMO_TREE)
    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(target), extra=DEMO_CONFIG))
    text = ws.config_path.read_text()
    assert "[[kb.inventory.rules]]" in text and 'call = ["demo_can_fuse"]' in text
    result = CliRunner().invoke(main, ["-w", str(ws.root), "kb", "inventory", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["backends"] == ["accel", "cpu"]
    assert [(g["ops"], g["missing"]) for g in data["gaps"]] == [(["RMS_NORM", "MUL"], ["cpu"])]
    assert isinstance(data["gaps"][0]["id"], int)


def test_cli_rule_options_and_no_store(tmp_path: Path) -> None:
    from kb.init import TargetSpec, create_workspace

    tree = write_tree(tmp_path / "demo", DEMO_TREE)
    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(make_repo(tmp_path / "t"))))
    before = _dump(ws.db_path)
    args = [
        "-w",
        str(ws.root),
        "kb",
        "inventory",
        str(tree),
        "--json",
        "--no-store",
        "--backends-root",
        "src",
        "--backend-pattern",
        r"backend-(?P<name>\w+)",
        "--call",
        "demo_can_fuse",
        "--op-prefix",
        "OP_",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [(g["ops"], g["missing"], g["id"]) for g in data["gaps"]] == [(["RMS_NORM", "MUL"], ["cpu"], None)]
    assert _dump(ws.db_path) == before
    bad = CliRunner().invoke(main, [*args[:5], "--backend-pattern", "backend-(?P<name"])
    assert bad.exit_code != 0 and "not a valid regex" in bad.output
    assert _dump(ws.db_path) == before


def test_the_bundled_demo_target_has_its_gap(tmp_path: Path) -> None:
    demo = REPO / "examples" / "demo" / "target"
    if not (demo / "src").is_dir():
        pytest.skip("examples/demo/target is not in this checkout")
    inv = scan_path(demo, DEMO_SETTINGS)
    assert {"cpu", "accel"} <= set(inv.backends)
    gaps = {g.key: g for g in inv.gaps}
    assert "RMS_NORM+MUL" in gaps and gaps["RMS_NORM+MUL"].missing == ("cpu",)
    assert inv.gaps[0].target_missing


def test_config_pattern_rules_and_backend_globs(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path / "proj",
        {
            "kernels/k-fast/a.c": "void f(void) { FUSE2(OP_A_NORM, OP_A_SCALE); }\n",
            "kernels/k-slow/b.c": "void g(void) { FUSE2(OP_A_NORM, OP_A_ADD); }\n",
        },
    )
    rule = InventoryRule(pattern=r"FUSE2\((?P<ops>[^)]*)\)", op_prefix="OP_A_", backend_glob="fast")
    settings = InventorySettings(
        backends_root="kernels", backend_dir_pattern=r"k-(?P<name>\w+)", rules=[rule], target_backend="slow"
    )
    inv = scan_path(tree, settings)
    assert cells(inv) == {"fast": {"NORM+SCALE"}}
    assert [(g.key, g.missing, g.target_missing) for g in inv.gaps] == [("NORM+SCALE", ("slow",), True)]


# --- the command line, the database --------------------------------------------------------------


def _dump(db_path: Path) -> list[str]:
    conn = sqlite3.connect(db_path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_cli_read_only_without_a_workspace(
    ggml_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["kb", "inventory", str(ggml_tree), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"commit", "backends", "layout", "fusions", "gaps", "unclassified"}
    assert data["commit"] is None
    assert {
        "ops": ["RMS_NORM", "MUL"],
        "backend": "cpu",
        "file": "ggml/src/ggml-cpu/ggml-cpu.c",
        "line": 10,
    } in data["fusions"]
    assert all(set(g) == {"id", "ops", "present", "missing"} and g["id"] is None for g in data["gaps"])
    assert all(not op.startswith("GGML_OP_") for f in data["fusions"] for op in f["ops"])
    assert all(set(u) >= {"file", "line", "snippet", "why"} for u in data["unclassified"])
    assert not list(tmp_path.glob("**/autoresearch.db"))
    human = CliRunner().invoke(main, ["kb", "inventory", str(ggml_tree)])
    assert human.exit_code == 0
    assert re.search(r"^RMS_NORM\+MUL\+ADD\s+GAP\s+x", human.output, re.M)  # cpu column first, then cuda
    assert "Single ops fused by construction" in human.output
    assert "Unclassified (" in human.output and "Not stored" in human.output


def test_cli_stores_the_baseline_scan_and_rescans_in_place(tmp_path: Path) -> None:
    from kb.db import connect, insert, now, rows
    from kb.init import TargetSpec, create_workspace

    target = make_repo(tmp_path / "target", GGML_TREE)
    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(target)))
    runner = CliRunner()
    first = runner.invoke(main, ["--workspace", str(ws.root), "kb", "inventory", "--json"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.output)
    assert data["commit"] == ws.settings.target.baseline_commit
    db = connect(ws.db_path)
    sources = rows(db, "SELECT * FROM sources WHERE kind = 'inventory'")
    assert len(sources) == 1 and sources[0]["commit_sha"] == data["commit"]
    evidence = rows(db, "SELECT id, kind, title, section, meta FROM evidence ORDER BY id")
    kinds = [e["kind"] for e in evidence]
    assert kinds.count("fusion") == len(data["fusions"]) and kinds.count("gap") == len(data["gaps"])
    assert kinds.count("single_op") >= 2
    gap_ids = {g["id"] for g in data["gaps"]}
    assert gap_ids == {e["id"] for e in evidence if e["kind"] == "gap"}
    gap = next(e for e in evidence if e["kind"] == "gap" and e["title"] == "RMS_NORM+MUL+ADD")
    meta = json.loads(gap["meta"])
    assert (
        meta["present"] == ["cuda", "vulkan"]
        and "cpu" in meta["missing"]
        and meta["ops"] == ["RMS_NORM", "MUL", "ADD"]
    )
    fusion = rows(
        db,
        "SELECT f.*, e.title, e.section FROM fusions f JOIN evidence e ON e.id = f.evidence_id "
        "WHERE f.kind = 'graph' AND f.backend = 'cpu'",
    )
    assert [(f["ops"], f["title"], f["section"], f["file"]) for f in fusion] == [
        ("RMS_NORM+MUL", "RMS_NORM+MUL", "cpu", "ggml/src/ggml-cpu/ggml-cpu.c")
    ]
    hits = rows(db, "SELECT rowid FROM evidence_fts WHERE evidence_fts MATCH ?", ['"RMS_NORM" "ADD" "cpu"'])
    assert gap["id"] in {h["rowid"] for h in hits}
    # a hypothesis cites the gap; rescanning keeps every id and adds nothing
    hid = insert(
        db, "hypotheses", {"title": "Fuse RMS_NORM+MUL+ADD on cpu", "created_at": now(), "updated_at": now()}
    )
    insert(db, "hypothesis_evidence", {"hypothesis_id": hid, "evidence_id": gap["id"]})
    again = runner.invoke(main, ["--workspace", str(ws.root), "kb", "inventory", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output) == data
    assert rows(db, "SELECT id, kind, title FROM evidence ORDER BY id") == [
        {"id": e["id"], "kind": e["kind"], "title": e["title"]} for e in evidence
    ]
    assert len(rows(db, "SELECT id FROM sources WHERE kind = 'inventory'")) == 1
    db.conn.close()


def test_rescan_drops_vanished_rows_but_keeps_cited_ones(ggml_tree: Path, tmp_path: Path) -> None:
    from kb.db import connect, insert, now, one, rows
    from kb.init import TargetSpec, create_workspace

    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(make_repo(tmp_path / "t"))))
    runner = CliRunner()
    assert runner.invoke(main, ["-w", str(ws.root), "kb", "inventory", str(ggml_tree)]).exit_code == 0
    db = connect(ws.db_path)
    cited = one(db, "SELECT id FROM evidence WHERE kind = 'gap' AND title = 'RMS_NORM+MUL+ADD'")
    uncited = one(db, "SELECT id FROM evidence WHERE kind = 'gap' AND title = 'MUL_MAT+ADD'")
    assert cited and uncited
    hid = insert(db, "hypotheses", {"title": "h", "created_at": now(), "updated_at": now()})
    insert(db, "hypothesis_evidence", {"hypothesis_id": hid, "evidence_id": cited["id"]})
    # the cuda and vulkan fusions go away: both gaps vanish from the next scan of the same tree
    (ggml_tree / "ggml/src/ggml-cuda/ggml-cuda.cu").write_text("static int nothing_fused;\n")
    (ggml_tree / "ggml/src/ggml-vulkan/ggml-vulkan.cpp").write_text("static int nothing_fused;\n")
    assert runner.invoke(main, ["-w", str(ws.root), "kb", "inventory", str(ggml_tree)]).exit_code == 0
    kept = one(db, "SELECT meta FROM evidence WHERE id = ?", [cited["id"]])
    assert kept is not None and json.loads(kept["meta"])["stale"] is True
    assert one(db, "SELECT id FROM evidence WHERE id = ?", [uncited["id"]]) is None
    assert not rows(db, "SELECT ops FROM fusions WHERE backend IN ('cuda', 'vulkan') AND kind = 'graph'")
    assert one(db, "SELECT evidence_id FROM fusions WHERE evidence_id = ?", [cited["id"]]) is None
    db.conn.close()


def test_bad_input_no_backends_leaves_the_database_unchanged(tmp_path: Path, ggml_tree: Path) -> None:
    from kb.init import TargetSpec, create_workspace

    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(make_repo(tmp_path / "t"))))
    assert CliRunner().invoke(main, ["-w", str(ws.root), "kb", "inventory", str(ggml_tree)]).exit_code == 0
    before = _dump(ws.db_path)
    empty = write_tree(tmp_path / "plain", {"src/main.c": "int main(void) { return 0; }\n", "README": "x\n"})
    result = subprocess.run(
        [sys.executable, "-m", "tui.cli", "-w", str(ws.root), "kb", "inventory", str(empty)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    # Nothing found is not an error (exit 0): it says what it looked for and how to write rules.
    assert result.returncode == 0, result.stderr
    assert f"No compute backends in {empty}" in result.stdout and "[[kb.inventory.rules]]" in result.stdout
    assert _dump(ws.db_path) == before
    missing = CliRunner().invoke(main, ["-w", str(ws.root), "kb", "inventory", str(tmp_path / "nope")])
    assert missing.exit_code != 0 and "no such folder" in missing.output
    assert _dump(ws.db_path) == before


# --- the real thing ------------------------------------------------------------------------------


def regex_baseline(root: Path) -> set[tuple[str, str]]:
    """What the one-line regex `ggml_can_fuse\\([^)]*\\{([^}]*)\\}` finds, keyed like the inventory."""
    rx = re.compile(r"ggml_can_fuse\([^)]*\{([^}]*)\}")
    found: set[tuple[str, str]] = set()
    for folder in sorted((root / "ggml" / "src").iterdir()):
        m = re.fullmatch(r"ggml-([\w-]+)", folder.name)
        if not m or not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            if path.suffix not in {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".m", ".mm"}:
                continue
            for hit in rx.finditer(path.read_text(errors="replace")):
                key = "+".join(
                    normalise(re.findall(r"GGML_OP_(\w+)", hit.group(1)), frozenset(DEFAULT_VIEW_OPS))
                )
                if "+" in key:
                    found.add((m.group(1).lower(), key))
    return found


def score(found: set[tuple[str, str]], fixture: dict[str, object]) -> tuple[float, list[str], list[str]]:
    cells_ = fixture["cells"]
    assert isinstance(cells_, list)
    present = [(c["backend"], c["ops"]) for c in cells_ if c["present"]]
    absent = [(c["backend"], c["ops"]) for c in cells_ if not c["present"]]
    missed = [f"{b}:{o}" for b, o in present if (b, o) not in found]
    false = [f"{b}:{o}" for b, o in absent if (b, o) in found]
    return 1 - len(missed) / len(present), missed, false


def test_fixture_is_a_hand_checked_list() -> None:
    fixture = json.loads(FIXTURE.read_text())
    cells_ = fixture["cells"]
    assert len(cells_) >= 40
    assert {c["backend"] for c in cells_} >= {"cpu", "cuda", "metal", "vulkan", "sycl", "opencl"}
    assert sum(c["present"] for c in cells_) >= 40 and sum(not c["present"] for c in cells_) >= 20
    assert all(c["file"] and c["line"] > 0 for c in cells_ if c["present"])
    assert len({(c["backend"], c["ops"]) for c in cells_}) == len(cells_)


def _llamacpp_tree() -> Path:
    """AUTORESEARCH_LLAMACPP_SRC, or with AUTORESEARCH_LLAMACPP=1 the recipe's tree (from its cache)."""
    src = os.environ.get("AUTORESEARCH_LLAMACPP_SRC")
    if src:
        return Path(src)
    if os.environ.get("AUTORESEARCH_LLAMACPP") == "1":
        from runner.recipes import llamacpp
        from runner.recipes.cli import cache_dir

        cache = cache_dir()
        return llamacpp.prepare_tree(cache / f"llama.cpp-{llamacpp.UPSTREAM_COMMIT}", cache, lambda _: None)
    pytest.skip(
        "set AUTORESEARCH_LLAMACPP=1 (the recipe's tree, from PyPI) or AUTORESEARCH_LLAMACPP_SRC to a "
        "llama.cpp checkout (vendor/llama.cpp of llama-cpp-python 0.3.36)"
    )


@pytest.mark.llamacpp
def test_recall_on_llamacpp() -> None:
    root = _llamacpp_tree()
    fixture = json.loads(FIXTURE.read_text())
    inv = scan_path(root, InventorySettings())
    recall, missed, false = score({(f.backend, f.key) for f in inv.fusions}, fixture)
    base_recall, _, _ = score(regex_baseline(root), fixture)
    print(
        f"\ninventory recall {recall:.3f} missed {missed} false {false}; "
        f"one-line regex recall {base_recall:.3f}"
    )
    assert recall >= 0.9
    assert set(false) <= {"hexagon:MUL_MAT_ID+ADD"}  # the known false cell: a tag, not a kernel fusion
    assert base_recall < 0.5
    # everything missed is at least reported as unclassified in that backend
    assert {m.split(":")[0] for m in missed} <= {u.backend for u in inv.unclassified}
