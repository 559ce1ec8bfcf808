"""`autoresearch kb inventory [PATH] [--json]`: operator fusions per backend, and the gaps."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tui.cli.common import echo, echo_json, json_option, workspace
from tui.cli.params import PathArg

if TYPE_CHECKING:
    from kb.config import InventorySettings
    from kb.inventory import Inventory


def _settings(
    base: InventorySettings,
    backends_root: str | None,
    backend_pattern: str | None,
    calls: tuple[str, ...],
    op_prefix: str | None,
    target_backend: str | None,
) -> InventorySettings:
    from pydantic import ValidationError

    from kb.config import InventoryRule
    from kb.errors import UserError

    data = base.model_dump()
    if backends_root is not None:
        data["backends_root"] = backends_root
    if backend_pattern is not None:
        data["backend_dir_pattern"] = backend_pattern
    if target_backend is not None:
        data["target_backend"] = target_backend
    if calls or op_prefix:
        rule = InventoryRule(call=list(calls), op_prefix=op_prefix or "GGML_OP_")
        data["rules"] = [rule.model_dump()]
    try:
        return type(base).model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"--{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


_RULES_EXAMPLE = """\
  [kb.inventory]
  backends_root = "src/backends"        # one folder per backend: src/backends/cpu/, src/backends/gpu/
  backend_dir_pattern = '(?P<name>\\w+)'
  target_backend = "cpu"
  [[kb.inventory.rules]]
  call = ["my_can_fuse"]                # my_can_fuse(graph, i, (enum op[]){OP_RMS_NORM, OP_MUL}, 2)
  op_prefix = "OP_"
"""


def _no_backends(ref: str, settings: InventorySettings, as_json: bool) -> None:
    """A tree without compute backends: say what was looked for and how to describe another layout."""
    root = settings.backends_root or "ggml/src, src or the root"
    folders = "ggml-<name>/" if not settings.backends_root else (settings.backend_dir_pattern or "<backend>/")
    looked = f"{folders} folders with sources ({', '.join(settings.extensions)}) under {root}"
    if as_json:
        echo_json({"root": ref, "backends": [], "fusions": [], "gaps": [], "looked_for": looked})
        return
    echo(f"No compute backends in {ref}: looked for {looked}. Nothing stored.")
    echo(
        "The fusion inventory compares what several compute backends fuse (ggml: CPU, CUDA, Metal, ...); "
        "a tree with one code path has no gaps to mine."
    )
    echo("For another layout, describe it in autoresearch.toml (README, section Configuration):")
    echo(_RULES_EXAMPLE.rstrip())
    echo("Other sources of hypotheses: autoresearch kb add-fork, hypotheses generate --model, queue add.")


def _print_matrix(inv: Inventory) -> None:
    from kb.inventory import matrix

    active = [b for b in inv.backends if any(f.backend == b for f in inv.fusions) or b == inv.target_backend]
    idle = [b for b in inv.backends if b not in active]
    rows = matrix(inv)
    width = max([len("fusion"), *(len(key) for key, _, _ in rows)])
    widths = {b: max(len(b), 3) for b in active}
    head = "fusion".ljust(width) + "  " + "  ".join(b.center(widths[b]) for b in active) + "  gap"
    echo(head.rstrip())
    for key, present, gap in rows:
        cells = []
        for b in active:
            mark = "x" if present[b] else "."
            if b == inv.target_backend and gap is not None and gap.target_missing:
                mark = "GAP"
            cells.append(mark.center(widths[b]))
        note = ""
        if gap is not None:
            note = f"#{gap.id}" if gap.id is not None else "gap"
        echo((key.ljust(width) + "  " + "  ".join(cells) + "  " + note).rstrip())
    echo(f"x fused, . not fused, GAP missing in the target backend {inv.target_backend}.")
    if idle:
        echo(f"Backends with no fusion at all: {', '.join(idle)}.")


@click.command("inventory")
@click.argument("path", required=False, type=PathArg(path_type=Path))
@json_option
@click.option(
    "--commit", default=None, help="Commit to record for PATH (default: its HEAD if PATH is a checkout)."
)
@click.option(
    "--backends-root", default=None, help="Folder holding one folder per backend (default ggml/src)."
)
@click.option("--backend-pattern", default=None, help="Regex with a group `name` picking backend folders.")
@click.option("--call", "calls", multiple=True, help="Function whose call decides a fusion (repeatable).")
@click.option("--op-prefix", default=None, help="Prefix of the op constants (default GGML_OP_).")
@click.option("--target-backend", default=None, help="Backend whose gaps come first (default: config, cpu).")
@click.option("--no-store", is_flag=True, help="Print only; do not write the workspace database.")
@click.pass_context
def inventory(
    ctx: click.Context,
    path: Path | None,
    as_json: bool,
    commit: str | None,
    backends_root: str | None,
    backend_pattern: str | None,
    calls: tuple[str, ...],
    op_prefix: str | None,
    target_backend: str | None,
    no_store: bool,
) -> None:
    """Table the operator fusions each compute backend implements, and the gaps between backends.

    Without PATH, scans the workspace's target at its baseline commit; with PATH, scans that folder
    (a checkout of llama.cpp, or any tree the config's kb.inventory rules describe). Results are
    stored as evidence (fusion, gap, single_op) when a workspace is found; without one, PATH is
    scanned read-only. Rescanning the same tree and commit replaces the previous scan in place.
    """
    from kb.config import InventorySettings
    from kb.errors import UserError, WorkspaceNotFound
    from kb.inventory import scan_path, scan_workspace

    try:
        ws = workspace(ctx)
    except WorkspaceNotFound:
        if path is None:
            raise
        ws = None
    base = ws.settings.kb.inventory if ws is not None else InventorySettings()
    settings = _settings(base, backends_root, backend_pattern, calls, op_prefix, target_backend)
    ref = ws.settings.target.path if path is None and ws is not None else str(path.resolve() if path else "")
    try:
        if path is None:
            assert ws is not None
            inv = scan_workspace(ws, settings)
        else:
            inv = scan_path(path, settings, commit=commit)
    except UserError as exc:
        # The scanner's "no recognisable backends" (kb/inventory): nothing found is not an error.
        if "no recognisable backends" not in str(exc):
            raise
        _no_backends(ref, settings, as_json)
        return
    source_id: int | None = None
    if ws is not None and not no_store:
        from kb.inventory.store import store

        db = ws.db()
        try:
            source_id, inv = store(db, inv, ref=ref)
        finally:
            db.conn.close()
    if as_json:
        echo_json(inv.to_json())
        return
    echo(
        f"Backend fusion inventory of {ref}"
        + (f" @ {inv.commit[:12]}" if inv.commit else "")
        + f": {len(inv.backends)} backends, {inv.files_scanned} files, {len(inv.fusions)} fusions, "
        f"{len(inv.gaps)} gaps"
    )
    echo("")
    _print_matrix(inv)
    if inv.singles:
        echo("")
        echo("Single ops fused by construction (listed apart, never gaps):")
        by_backend: dict[str, list[str]] = {}
        for s in inv.singles:
            by_backend.setdefault(s.backend, []).append(s.op)
        for backend, ops in by_backend.items():
            echo(f"  {backend:10} {', '.join(ops)}")
    if inv.unclassified:
        echo("")
        echo(f"Unclassified ({len(inv.unclassified)}): fusion checks the scanner could not resolve")
        for u in inv.unclassified:
            echo(f"  {u.backend:10} {u.file}:{u.line}  {u.why}")
    echo("")
    if source_id is not None:
        echo(
            f"Stored as source #{source_id}: {len(inv.fusions)} fusion, {len(inv.gaps)} gap and "
            f"{len(inv.singles)} single-op evidence rows (cite the gap ids with `kb show ID`)."
        )
    else:
        echo("Not stored (no workspace, or --no-store).")
