"""The backend fusion inventory: which operator fusions each compute backend of the target implements.

    inv = scan_path(Path("llama.cpp"), InventorySettings())       # a folder on disk
    inv = scan_workspace(ws)                                        # the target at its baseline
    inv.fusions, inv.gaps, inv.singles, inv.unclassified

Modules, in the order the work flows:
- layout: where a tree keeps its backends (folders, files, the old layout's CPU code, the config);
- csource: the C-family source reader (comments and dead code blanked, functions, statements);
- sources: a backend's files and the definitions looked up in them;
- evaluator, simulate: what an op-list argument can be (literals, named lists, tables, run time);
- predicates: the calls that decide a fusion (configured ones, wrappers, matchers), their arguments;
- chains: hand-written next-node checks under `case` labels;
- scanner: one backend's fusion checks: `BackendScanner` holds a `Reporter` (model), the `Sources`,
  an `Evaluator` (with its `Simulator`) and the `NextNodeChecks`, each given what it needs;
- scan: the whole tree, merged into fusions and gaps; store: the result as evidence in the database.
"""

from kb.inventory.layout import BackendMap, DirTree, GitTree, Layout, Tree, find_layout
from kb.inventory.model import (
    GGML_CALLS,
    Fusion,
    Gap,
    Inventory,
    SingleOp,
    Site,
    Unclassified,
    normalise,
)
from kb.inventory.scan import find_gaps, matrix, merge_sites, scan_path, scan_tree, scan_workspace

__all__ = [
    "GGML_CALLS",
    "BackendMap",
    "DirTree",
    "Fusion",
    "Gap",
    "GitTree",
    "Inventory",
    "Layout",
    "SingleOp",
    "Site",
    "Tree",
    "Unclassified",
    "find_gaps",
    "find_layout",
    "matrix",
    "merge_sites",
    "normalise",
    "scan_path",
    "scan_tree",
    "scan_workspace",
]
