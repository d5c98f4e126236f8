"""Paired statistics over per-row [numerator, denominator] metrics (standard library only).

- `ratio`: a metric's value is the ratio of sums over rows (a rate over rows when every
  denominator is 1, a rate over claims or facts otherwise).
- `cluster_bootstrap`: 95 % percentile interval of a ratio, resampling clusters (episodes) with
  replacement; `paired_bootstrap` does the same for the difference A - B on the rows both arms
  have, resampling the same clusters for both arms (Miller, "Adding Error Bars to Evals").
- `mcnemar_exact`: two-sided exact McNemar test on paired binary outcomes (binomial test of the
  discordant pairs at p = 1/2).
- `zscores`: per-row z-scores across arms (each row centred and scaled over the arms that ran
  it), averaged per arm; arms evaluated on different mixes are then never ranked by raw means.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from statistics import mean, pstdev

Pair = Sequence[float]  # [numerator, denominator]
DEFAULT_RESAMPLES = 2000


def ratio(pairs: Sequence[Pair]) -> float | None:
    den = sum(p[1] for p in pairs)
    return None if den == 0 else sum(p[0] for p in pairs) / den


def _clusters(keys: Sequence[str], *columns: Sequence[Pair]) -> list[tuple[float, ...]]:
    """Per cluster: (num_1, den_1, num_2, den_2, ...) summed over its rows."""
    order: dict[str, list[float]] = {}
    for i, key in enumerate(keys):
        acc = order.setdefault(key, [0.0] * (2 * len(columns)))
        for j, col in enumerate(columns):
            acc[2 * j] += col[i][0]
            acc[2 * j + 1] += col[i][1]
    return [tuple(v) for v in order.values()]


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of values, q in [0, 1] in steps of
    0.001 (`statistics.quantiles`, inclusive method)."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1 or q <= 0:
        return min(values)
    if q >= 1:
        return max(values)
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def _interval(draws: list[float], level: float) -> list[float] | None:
    if not draws:
        return None
    draws.sort()
    tail = (1 - level) / 2
    return [_percentile(draws, tail), _percentile(draws, 1 - tail)]


def cluster_bootstrap(pairs: Sequence[Pair], clusters: Sequence[str], *,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                      level: float = 0.95) -> list[float] | None:
    """Percentile interval of `ratio(pairs)` resampling clusters; None without data. Resamples
    whose denominator is 0 are skipped."""
    if len(pairs) != len(clusters):
        raise ValueError("pairs and clusters differ in length")
    cl = _clusters(clusters, pairs)
    if not cl:
        return None
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        num = den = 0.0
        for _ in range(len(cl)):
            c = cl[rng.randrange(len(cl))]
            num += c[0]
            den += c[1]
        if den:
            draws.append(num / den)
    return _interval(draws, level)


def paired_bootstrap(a: Sequence[Pair], b: Sequence[Pair], clusters: Sequence[str], *,
                     resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     level: float = 0.95) -> list[float] | None:
    """Percentile interval of ratio(a) - ratio(b) over paired rows, resampling clusters."""
    if not (len(a) == len(b) == len(clusters)):
        raise ValueError("paired columns and clusters differ in length")
    cl = _clusters(clusters, a, b)
    if not cl:
        return None
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        na = da = nb = db = 0.0
        for _ in range(len(cl)):
            c = cl[rng.randrange(len(cl))]
            na += c[0]
            da += c[1]
            nb += c[2]
            db += c[3]
        if da and db:
            draws.append(na / da - nb / db)
    return _interval(draws, level)


def mcnemar_exact(a: Sequence[int], b: Sequence[int]) -> dict[str, float]:
    """Exact two-sided McNemar test of paired binary outcomes. `b01`: rows A got right and B got
    wrong; `b10`: the reverse; p = min(1, 2 * P(X <= min) for X ~ Binomial(b01 + b10, 1/2))."""
    if len(a) != len(b):
        raise ValueError("paired outcomes differ in length")
    if any(x not in (0, 1) for x in (*a, *b)):
        raise ValueError("McNemar needs 0/1 outcomes")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x == 1 and y == 0)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if x == 0 and y == 1)
    n = a_only + b_only
    if n == 0:
        p = 1.0
    else:
        k = min(a_only, b_only)
        p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)
    return {"a_only": a_only, "b_only": b_only, "discordant": n, "p": p}


def zscores(scores: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """scores: arm -> row id -> score. Per row, z = (score - mean over arms) / sd over arms
    (population sd; 0 when all arms agree); rows only one arm ran are left out. Returns
    arm -> {"mean_z", "n"}."""
    arms = list(scores)
    rows = sorted({r for arm in arms for r in scores[arm]})
    per_arm: dict[str, list[float]] = {arm: [] for arm in arms}
    for r in rows:
        have = [arm for arm in arms if r in scores[arm]]
        if len(have) < 2:
            continue
        values = [scores[arm][r] for arm in have]
        mu, sd = mean(values), pstdev(values)
        for arm in have:
            per_arm[arm].append(0.0 if sd == 0 else (scores[arm][r] - mu) / sd)
    return {arm: {"mean_z": mean(v) if v else None, "n": len(v)} for arm, v in per_arm.items()}
