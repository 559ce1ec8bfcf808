"""Keep, discard or inconclusive: statistics that survive noisy shared machines.

Pure Python and the standard library (no numpy, no scipy): the runner calls it after every batch.

The package by concern: `kb.policy` (how an experiment is judged, the planned looks: a pure value
kept below everything, so the config is validated by it too), `paired` (the
statistics: screen, estimator, tests, t distribution), `decide` (verdicts, guards, the A/A
self-test, planning figures), `judge` (the one judge of a look, which the loop and `redecide`
both call) and `fmt` (how the numbers read). Everything public is re-exported
here, and callers import it from `runner.stats`.

Method, and why
---------------
*Effect scale.* A pair is one baseline (A) value and one candidate (B) value measured back to back
on one worker. Each pair gives a log ratio ``d = log(B/A)`` (direction ``higher``) or
``log(A/B)`` (direction ``lower``), so a positive ``d`` is always an improvement. Slow drift of the
machine multiplies both sides of a pair alike and cancels in the ratio. Effects are reported on the
relative scale, ``exp(d) - 1``: +0.03 means 3% better.

*Estimator and test.* The Hodges-Lehmann estimate (median of the Walsh averages of ``d``) with the
Wilcoxon signed-rank test and its interval, exact up to ``EXACT_MAX`` pairs. Its only assumption is
that, when the candidate changes nothing, ``d`` is symmetric about zero, which measuring A and B
back to back on one machine provides; so its error rates hold for heavy-tailed noise too, down to
the small per-look levels the sequential rule needs. (A 20% trimmed mean with a Student t interval
was about 5% more efficient on the benchmark's noise, but its t approximation rejected 1.2 to 1.6
times too often at one-sided levels of 0.001 and below, even for normal noise.)

*Noisy neighbours.* A neighbour that slows one sample by 30% puts its pair far into a tail of
``d``. Before the test, pairs whose two sides *together* ran much slower than the pairs measured
around them (sum of the log values below a running median by more than ``SCREEN_K`` robust
standard deviations; at most a quarter of the pairs) are set aside. The screen looks only at the
sum of each pair, which swapping A and B leaves unchanged, so it cannot bias the sign test: the
error rates still hold. It gains power when interference is large against the noise (at 5% noise,
keeps of a true +3% rise from about 55% to about 65% in the benchmark) and sets aside almost nothing
otherwise.

*Repeated looks.* The runner measures in batches and asks after each whether to stop; testing every
look at the whole alpha would inflate false keeps. The policy plans its looks (``min_pairs``, then
every ``batch`` pairs, up to ``max_pairs``) and splits alpha across them Bonferroni-style: look
``j`` gets the share ``t_j**3 - t_(j-1)**3`` of alpha, with ``t_j = pairs_j / max_pairs``. The
shares sum to one, so by the union bound the chance of a false keep over all looks stays below
alpha / 2 whatever the correlation between looks. The cubic weights spend little early (only a
large effect stops a run after 16 pairs; none can after 8) and keep most of alpha for the last
looks, where a small effect needs it. Each look reports its interval at its own level
``1 - share * alpha`` (a repeated confidence interval: all of them cover the true effect at once
with probability >= 1 - alpha), and keep and discard are both read from it. The guarantee needs
the caller to look at most once per planned look; a look at a pair count between two planned looks
counts as the next planned look. ``Policy(sequential=False)`` is one look with the whole alpha,
for a fixed-size experiment analysed once.

*p-values.* ``p_value`` is the one-sided p-value of "effect > 0", doubled (so that it compares
with alpha as the two-sided interval does) and divided by the look's share of alpha:
``p_value <= alpha`` exactly when the look's interval lies above zero. Across a wave,
``q_value`` is the Benjamini-Hochberg adjustment of those p-values over every experiment of the
wave, and a keep needs ``q_value <= alpha``: false discoveries are controlled across the wave.

*Verdicts.* ``keep`` when significant (as above) and the estimate is at least ``min_effect``;
``discard`` when the whole interval lies below ``min_effect``; otherwise ``continue`` (add pairs),
which becomes ``inconclusive`` at the cap or when the caller says the look is final.

*Unpaired samples* (``decide_unpaired``, for ``autoresearch analyze`` without ``--paired``):
Yuen's two-sample test of 20% trimmed means of the log values, Welch-Satterthwaite degrees of
freedom, one look at the whole alpha (where its t approximation is accurate).

*Guards* (``apply_guards``): a keep whose guard metric is significantly worse than its limit (the
whole interval of the guard metric's effect lies below ``-max_loss``) becomes a discard; a keep whose
guard metric was measured on fewer pairs than the keep (left out by the candidate) is inconclusive.

*Noise* (``noise``): the per-sample coefficient of variation of one side. *A/A self-test*
(``self_test``): baseline against baseline; "no difference" means the interval contains 0, and the
interval's half-width is the noise floor, the smallest effect this setup can resolve.
"""

from kb.policy import MIN_VALUES as MIN_VALUES
from kb.policy import SPENDING_POWER as SPENDING_POWER
from kb.policy import Direction as Direction
from kb.policy import Policy as Policy
from runner.stats.decide import Case as Case
from runner.stats.decide import Decision as Decision
from runner.stats.decide import Guard as Guard
from runner.stats.decide import Resolution as Resolution
from runner.stats.decide import SelfTest as SelfTest
from runner.stats.decide import Verdict as Verdict
from runner.stats.decide import apply_guards as apply_guards
from runner.stats.decide import confirm_by_wall_clock as confirm_by_wall_clock
from runner.stats.decide import decide_paired as decide_paired
from runner.stats.decide import decide_unpaired as decide_unpaired
from runner.stats.decide import decide_wave as decide_wave
from runner.stats.decide import pairs_to_resolve as pairs_to_resolve
from runner.stats.decide import resolution as resolution
from runner.stats.decide import self_test as self_test
from runner.stats.fmt import cell_interval as cell_interval
from runner.stats.fmt import cell_pct as cell_pct
from runner.stats.fmt import interval as interval
from runner.stats.fmt import pct as pct
from runner.stats.judge import Confirmation as Confirmation
from runner.stats.judge import Rules as Rules
from runner.stats.judge import confirm_keep as confirm_keep
from runner.stats.judge import judge as judge
from runner.stats.paired import EXACT_MAX as EXACT_MAX
from runner.stats.paired import SCREEN_HALF_WINDOW as SCREEN_HALF_WINDOW
from runner.stats.paired import SCREEN_K as SCREEN_K
from runner.stats.paired import SCREEN_MAX_FRACTION as SCREEN_MAX_FRACTION
from runner.stats.paired import SCREEN_MIN as SCREEN_MIN
from runner.stats.paired import TRIM as TRIM
from runner.stats.paired import benjamini_hochberg as benjamini_hochberg
from runner.stats.paired import noise as noise
from runner.stats.paired import pair_values as pair_values
from runner.stats.paired import ratio_defined as ratio_defined
from runner.stats.paired import side_value as side_value
from runner.stats.paired import t_quantile as t_quantile
from runner.stats.paired import t_sf as t_sf
