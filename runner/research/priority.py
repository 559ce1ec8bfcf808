"""Queue priority: the expected gain of a hypothesis per unit of cost.

priority = 100 * expected_effect * confidence / cost, so a +3% idea held with confidence 0.5 that
costs one ordinary experiment scores 1.5. Unknown values take cautious defaults; a negative expected
effect scores 0 (it can still be run by hand).
"""

from __future__ import annotations

DEFAULT_EFFECT = 0.01
"""An unstated effect is assumed to be at the default keep threshold (1%)."""
DEFAULT_CONFIDENCE = 0.3
DEFAULT_COST = 1.0
"""Cost unit: one ordinary experiment (build + paired benchmark). Large or risky patches cost more."""
MIN_COST = 0.1


def priority(
    expected_effect: float | None, confidence: float | None = None, cost: float | None = None
) -> float:
    effect = DEFAULT_EFFECT if expected_effect is None else expected_effect
    conf = DEFAULT_CONFIDENCE if confidence is None else min(max(confidence, 0.0), 1.0)
    spend = DEFAULT_COST if cost is None else max(cost, MIN_COST)
    return round(100.0 * max(effect, 0.0) * conf / spend, 4)
