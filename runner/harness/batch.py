"""What a batch job is given: its timeouts and the environment the template passes to the run
script (`ar-run.sh`). One definition for the runner's batches, a SkyPilot worker's qualification
job and `autoresearch validate` (both the baseline against itself), so all run the protocol alike."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.harness.prepare import A_DIR, B_DIR, Scripts
from runner.harness.sandbox import sandbox_envs
from runner.harness.template import one_line

if TYPE_CHECKING:
    from kb.config import Settings
    from kb.workspace import Workspace


@dataclass(frozen=True)
class Timeouts:
    build: int
    bench: int
    check: int

    @classmethod
    def of(cls, settings: Settings, options: Mapping[str, Any]) -> Timeouts:
        """The run's own timeouts (`run --build-timeout ...`, stored with its options) over the config's."""
        t = settings.timeouts
        return cls(
            build=options.get("build_timeout") or t.build,
            bench=options.get("bench_timeout") or t.bench,
            check=options.get("check_timeout") or t.check,
        )

    def job_seconds(self, pairs: int, run_checks: bool) -> int:
        """Longest a batch may take: two builds, two invocations a pair, the checks (5 s slack each)."""
        return 2 * (self.build + 5) + pairs * 2 * (self.bench + 5) + (self.check + 5 if run_checks else 0)


def pair_order(nonce: str, pairs: int) -> str:
    """The side order of each pair of a batch, `AB` or `BA`, space-separated (the template's
    PAIR_ORDER).

    Pairs go in blocks of two, one AB and one BA each, so a machine that drifts steadily during a
    block favours neither side (what a fixed ABBA order by pair number gives). Which of the two
    comes first is drawn per block from the batch's nonce, which no step is given: with a fixed order,
    two workers sharing a machine (local slots, pods on one node) run their A and B sides in step,
    and whatever one does to the machine lands on the same side of the other's every pair (a bias
    no number of pairs removes); drawn, it lands on either side alike (noise, which the interval
    shows). A block cut by the batch's end leaves one pair, its order drawn too."""
    rng = random.Random(f"{nonce}:pair-order")
    orders: list[str] = []
    while len(orders) < pairs:
        orders.extend(("AB", "BA") if rng.random() < 0.5 else ("BA", "AB"))
    return " ".join(orders[:pairs])


def batch_envs(
    ws: Workspace,
    settings: Settings,
    scripts: Scripts,
    timeouts: Timeouts,
    *,
    experiment_id: int | str,
    title: str,
    batch: int,
    pair_start: int,
    pairs: int,
    run_checks: bool,
    nonce: str,
    one_tree: bool = False,
) -> dict[str, Any]:
    """The batch's variables; target.env first, so the protocol's own always win.

    `one_tree`: both sides measure the baseline's tree (`autoresearch validate`: one build, the
    baseline against itself). The sandbox's variables are `[sandbox]`'s for validate too: its steps
    must see what a run's steps see (a toolchain in `sandbox.expose`, say), or a validation that
    passed would say nothing about the run."""
    return {
        **settings.target.env,
        "EXPERIMENT_ID": experiment_id,
        "EXPERIMENT_DESC": one_line(title),
        "BUILD_CMD": settings.target.build_cmd,
        "BUILD_TIMEOUT": timeouts.build,
        "BENCH_TIMEOUT": timeouts.bench,
        "CHECK_TIMEOUT": timeouts.check,
        "BENCH_SCRIPT": scripts.bench.path,
        "CHECKS_SCRIPT": scripts.checks.path,
        "A_DIR": A_DIR,
        "B_DIR": A_DIR if one_tree else B_DIR,
        "BATCH": batch,
        "PAIR_START": pair_start,
        "PAIRS": pairs,
        "PAIR_ORDER": pair_order(nonce, pairs),
        "RUN_CHECKS": int(run_checks),
        "AUTORESEARCH_NONCE": nonce,
        **sandbox_envs(ws),
    }
