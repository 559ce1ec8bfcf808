"""The demo's target and workspace: the example repositories, the demo's config, the folder.

What `autoresearch demo` sets up before anything runs (stage 1 of runner.demo.script): the target
and its fork built from `examples/demo` (build_repos.py), the demo's policy, fleet and timeouts,
and a folder that is empty or holds an earlier demo (`--force` removes only what a demo made).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.packaged import demo_dir

if TYPE_CHECKING:
    from kb.workspace import Workspace


DemoProgress = Callable[[str, str], None]
"""progress(stage, line): a stage name (workspace, papers, ...) and one line to show: the stage's
headline when it starts (no indent), then indented detail lines."""


RUN_NAME = "demo"


FORK_NAME = "demo-fork"


DEFAULT_DIR = "autoresearch-demo"


# What the demo creates in its folder; --force removes these (and only these) from an earlier demo.
_REPOS = "repos"


ARTICLES = "articles"


_OWN_ENTRIES = (
    "autoresearch.toml",
    "autoresearch.db",
    "autoresearch.db-wal",
    "autoresearch.db-shm",
    "mirror.git",
    "logs",
    "worktrees",
    "patches",
    "reports",
    _REPOS,
    ARTICLES,
)


DEMO_POLICY: dict[str, Any] = {
    "min_effect": 0.02,
    # The demo's neutral refactor changes nothing: at alpha 0.05 it would be kept up to 1 run in 40
    # (false keeps stay below alpha / 2), and CI saw it once. Its real effects (+40%, +60%, -30%)
    # are as clear at 0.01, where the neutral is kept 1 run in 200 at most.
    "alpha": 0.01,
    "min_pairs": 12,
    "batch_pairs": 8,
    "max_pairs": 32,
    "self_test_pairs": 12,
}


DEMO_WAVE_SIZE = 12
"""Every mined patch in one wave, measured against the original baseline: a patch measured on top
of an earlier winner answers another question (0005 only touches a function the fused path of 0001
no longer calls, and such a change can still move the binary's layout by several percent)."""


DEMO_BENCH_REPS = 3


DEMO_BENCH_ITERS = 3
"""Each sample is the median of this many graph evaluations (the bench's default is 5): three
samples of three cost a third less than three of five, for about the same noise."""


DEMO_TIMEOUTS = {"build": 180, "bench": 60, "check": 180}


DEMO_BUDGET_MINUTES = 15.0
"""A safety net only: the demo takes 1.5 to 3 minutes on 2 cores."""


DEMO_INVENTORY: dict[str, Any] = {
    "target_backend": "cpu",
    "backends_root": "src",
    "backend_dir_pattern": r"backend-(?P<name>[\w-]+)",
    "rules": [{"call": ["demo_can_fuse"], "op_prefix": "OP_"}],
}
"""How the fusion inventory reads the demo target: backends under src/backend-*, fusions where
`demo_can_fuse` names OP_* ops."""


@dataclass
class DemoOptions:
    directory: Path
    force: bool = False
    """Replace an earlier demo in `directory` (only what the demo made there is removed)."""
    model: str | None = None
    """A litellm model: also generate hypotheses from the KB and have the LLM write their patches."""
    api_base: str | None = None
    parallel: int = 2
    policy: dict[str, Any] = field(default_factory=dict)
    """Overrides of DEMO_POLICY (tests use a smaller cap)."""
    bench_reps: int = DEMO_BENCH_REPS
    repos: tuple[Path, Path] | None = None
    """Use these (upstream, fork) repositories instead of building them from examples/demo."""
    self_test: bool = True
    final: bool = True
    """Measure the winners stacked and each one left out at the end."""
    llm_hypotheses: int = 3


def load_build_repos() -> ModuleType:
    """examples/demo/build_repos.py, loaded by path (a script too: it is not imported as a module
    of the data package, whose folders are data)."""
    path = demo_dir() / "build_repos.py"
    name = "autoresearch_demo_build_repos"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def demo_config(
    parallel: int, bench_reps: int, policy: dict[str, Any], model: str | None, api_base: str | None
) -> dict[str, Any]:
    """The config sections of the demo workspace (written into its autoresearch.toml)."""
    config: dict[str, Any] = {
        "target": {
            "build_cmd": "make -j2",
            # Several samples per invocation: each side of a pair is their median (less noise).
            "env": {"BENCH_REPS": str(bench_reps), "BENCH_ITERS": str(DEMO_BENCH_ITERS)},
        },
        "metric": {"primary": "throughput", "direction": "higher", "unit": "graphs/s"},
        "policy": {**DEMO_POLICY, **policy},
        "fleet": {"backend": "local", "parallel": parallel, "wave_size": DEMO_WAVE_SIZE},
        "timeouts": dict(DEMO_TIMEOUTS),
        "budget": {"minutes": DEMO_BUDGET_MINUTES},
        "kb": {"inventory": copy.deepcopy(DEMO_INVENTORY)},
    }
    if model:
        config["llm"] = {"model": model, **({"api_base": api_base} if api_base else {})}
    return config


def check_tools() -> None:
    """The demo builds C code in git worktrees: say what is missing before anything is written."""
    missing = [
        tool
        for tool in ("git", "make", (os.environ.get("CC") or "cc").split()[0])
        if shutil.which(tool) is None
    ]
    if missing:
        raise UserError(
            f"{', '.join(missing)}: not found on PATH; the demo needs git, make and a C compiler "
            "(e.g. apt install build-essential git)"
        )


def _is_earlier_demo(root: Path) -> bool:
    config = root / "autoresearch.toml"
    if not config.is_file():
        return False
    import tomllib

    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    path = str(data.get("target", {}).get("path", ""))
    return Path(path).resolve() == (root / _REPOS / "upstream").resolve()


def prepare_folder(root: Path, force: bool) -> None:
    """Refuse a non-empty folder unless --force; --force removes only an earlier demo's entries."""
    if root.exists() and not root.is_dir():
        raise UserError(f"{root}: exists and is not a folder")
    if not root.exists() or not any(root.iterdir()):
        return
    if not force:
        raise UserError(
            f"{root}: not empty; pass --force to replace an earlier demo there, or choose another folder"
        )
    present = [name for name in _OWN_ENTRIES if (root / name).exists() or (root / name).is_symlink()]
    if present and not _is_earlier_demo(root):
        raise UserError(
            f"{root}: holds {present[0]} but is not an earlier demo workspace; --force replaces only "
            "an earlier demo (choose another folder)"
        )
    for name in present:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            _rmtree(path)
        else:
            path.unlink()


def _rmtree(path: Path) -> None:
    def writable_then_retry(func: Callable[[str], object], target: str, _exc: object) -> None:
        # Scripts are placed read-only into experiment trees; a folder may have lost its write bit.
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.exists(target) and not os.path.isdir(target):
            os.chmod(target, 0o600)
        func(target)

    shutil.rmtree(path, onerror=writable_then_retry)


def make_workspace(
    root: Path, example: Path, options: DemoOptions, say: DemoProgress
) -> tuple[Workspace, Path, Path]:
    from kb.init import TargetSpec, create_workspace

    created_root = not root.exists()
    made: list[Path] = []
    try:
        root.mkdir(parents=True, exist_ok=True)
        if options.repos is not None:
            upstream, fork = (Path(p).resolve() for p in options.repos)
            say("workspace", f"  target {upstream}, fork {fork} (given)")
        else:
            build_repos = load_build_repos()
            made.append(root / _REPOS)
            upstream, fork = build_repos.build(root / _REPOS)
            say("workspace", f"  target repository {upstream} (branch main, one baseline commit)")
            say("workspace", f"  fork repository   {fork} ({len(build_repos.FORK_PATCHES)} commits on top)")
        made.append(root / ARTICLES)
        shutil.copytree(example / "articles", root / ARTICLES)
        ws = create_workspace(
            root,
            TargetSpec(
                location=str(upstream),
                baseline="main",
                parallel=options.parallel,
                extra=demo_config(
                    options.parallel, options.bench_reps, options.policy, options.model, options.api_base
                ),
            ),
        )
    except BaseException:
        if created_root and root.exists():
            _rmtree(root)
        elif not created_root:
            for path in made:
                if path.exists():
                    _rmtree(path)
        raise
    policy = ws.settings.policy
    say(
        "workspace",
        f"  workspace created: metric throughput (higher is better), {options.parallel} local "
        f"workers; a first look after {policy.min_pairs} pairs, then batches of {policy.batch_pairs} "
        f"up to {policy.max_pairs}; min effect {policy.min_effect:.0%}; {options.bench_reps} samples "
        "per benchmark run",
    )
    return ws, upstream, fork
