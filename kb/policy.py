"""How an experiment is judged (`Policy`): the minimum effect, alpha, and the planned looks that
alpha is spent over (runner/stats's package docstring, *Repeated looks*, says why).

A pure value with no dependency, kept below everything so that its bounds are the one rule: the
statistics (runner.stats re-exports it), the workspace config's [policy] (kb/config.py builds a
Policy to validate the section), `analyze`, `redecide` and the import all accept what it accepts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from kb.errors import UserError

Direction = Literal["higher", "lower"]


#: Exponent of the alpha-spending weights over the planned looks (see the module docstring).
SPENDING_POWER = 3.0
#: Fewest values (pairs, or samples per side) an interval can be computed from.
MIN_VALUES = 3


@dataclass(frozen=True)
class Policy:
    """How an experiment is judged. Defaults follow the design: 1% minimum effect, 95%, 80 pairs."""

    min_effect: float = 0.01
    """Smallest relative improvement worth keeping (0.01 = 1%)."""
    alpha: float = 0.05
    """Error rate: intervals are at 1 - alpha overall; false keeps stay below alpha / 2. Below 0.5:
    at 0.5 a coin would keep a patch one time in four."""
    max_pairs: int = 80
    """The cap: at this many pairs an undecided experiment is inconclusive."""
    min_pairs: int = 8
    """Pairs of the first look; no verdict before it."""
    batch: int = 8
    """Pairs added between two looks."""
    direction: Direction = "higher"
    """Whether a higher value of the metric is better (throughput) or a lower one (time)."""
    fdr: bool = True
    """Control the false discovery rate across the experiments of a wave (Benjamini-Hochberg)."""
    sequential: bool = True
    """Split alpha over the planned looks; False: one look at the whole alpha."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise UserError(f"alpha {self.alpha}: must lie between 0 and 0.5")
        if not 0 <= self.min_effect < 1:
            raise UserError(f"min_effect {self.min_effect}: must lie in [0, 1)")
        if self.min_pairs < MIN_VALUES:
            raise UserError(f"min_pairs {self.min_pairs}: must be at least {MIN_VALUES}")
        if self.max_pairs < self.min_pairs:
            raise UserError(f"max_pairs {self.max_pairs}: must be at least min_pairs ({self.min_pairs})")
        if self.batch < 1:
            raise UserError(f"batch {self.batch}: must be at least 1")
        if self.direction not in ("higher", "lower"):
            raise UserError(f"direction {self.direction!r}: must be 'higher' or 'lower'")

    def looks(self) -> tuple[int, ...]:
        """Pair counts at which the runner should ask for a decision: min_pairs, +batch, ..., cap."""
        return _looks(self.min_pairs, self.batch, self.max_pairs)

    def look_share(self, pairs: int) -> float:
        """Share of alpha spent at the look that `pairs` pairs count as (1.0 for a single look)."""
        if not self.sequential:
            return 1.0
        looks = self.looks()
        index = next((i for i, n in enumerate(looks) if n >= pairs), len(looks) - 1)
        before = looks[index - 1] / self.max_pairs if index else 0.0
        now = looks[index] / self.max_pairs
        return float(now**SPENDING_POWER - before**SPENDING_POWER)


@lru_cache(maxsize=64)
def _looks(min_pairs: int, batch: int, max_pairs: int) -> tuple[int, ...]:
    return (*range(min_pairs, max_pairs, batch), max_pairs)
