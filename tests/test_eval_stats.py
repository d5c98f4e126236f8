"""Statistics on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from memworker.eval import stats
from memworker.eval.summary import comparison_pairs


def test_ratio_of_sums():
    assert stats.ratio([[1, 2], [3, 4]]) == pytest.approx(4 / 6)
    assert stats.ratio([[0, 0]]) is None and stats.ratio([]) is None


@pytest.mark.parametrize("a,b,a_only,b_only,p", [
    ([1] * 5, [0] * 5, 5, 0, 2 / 32),                         # 2 * P(X <= 0), n = 5
    ([1, 1, 1, 0, 1, 1], [0, 0, 0, 1, 1, 1], 3, 1, 2 * (1 + 4) / 16),   # n = 4, k = 1
    ([1, 0, 1], [1, 0, 1], 0, 0, 1.0),                        # no discordant pair
    ([1, 0], [0, 1], 1, 1, 1.0),                              # 2 * P(X <= 1 | n=2) = 1.5 -> 1
    ([1] * 10 + [0] * 2, [0] * 10 + [1] * 2, 10, 2, 2 * (1 + 12 + 66) / 4096),
])
def test_mcnemar_exact(a, b, a_only, b_only, p):
    out = stats.mcnemar_exact(a, b)
    assert (out["a_only"], out["b_only"]) == (a_only, b_only)
    assert out["p"] == pytest.approx(p)


def test_mcnemar_rejects_non_binary():
    with pytest.raises(ValueError):
        stats.mcnemar_exact([0.5], [1])


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert stats._percentile(values, 0.5) == pytest.approx(2.5)
    assert stats._percentile(values, 0.025) == pytest.approx(1.075)
    assert stats._percentile(values, 1.0) == 4.0


def test_bootstrap_degenerate_and_bounded_cases():
    # every cluster has the same ratio -> the interval is that value
    assert stats.cluster_bootstrap([[1, 2]] * 6, list("abcdef")) == pytest.approx([0.5, 0.5])
    # identical arms -> difference 0; a constant +1 difference -> [1, 1]
    a = [[1, 1], [0, 1], [1, 1]]
    assert stats.paired_bootstrap(a, a, ["x", "y", "z"]) == pytest.approx([0.0, 0.0])
    assert stats.paired_bootstrap([[1, 1]] * 3, [[0, 1]] * 3, list("xyz")) == \
        pytest.approx([1.0, 1.0])
    assert stats.cluster_bootstrap([], []) is None


def test_bootstrap_resamples_clusters_not_rows():
    """Two episodes: one with 3 correct rows, one with 1 wrong row. Resampling clusters can
    only give 0/1 (both draws the wrong one), 3/4 (one of each) or 3/3; resampling rows would
    give other values (1/2, 2/3 ...)."""
    pairs = [[1, 1], [1, 1], [1, 1], [0, 1]]
    clusters = ["e1", "e1", "e1", "e2"]
    ci = stats.cluster_bootstrap(pairs, clusters, resamples=400, seed=3)
    assert ci[0] == pytest.approx(0.0) and ci[1] == pytest.approx(1.0)
    import random

    rng = random.Random(3)
    cl = stats._clusters(clusters, pairs)
    assert sorted(cl) == [(0.0, 1.0), (3.0, 3.0)]
    draws = set()
    for _ in range(200):
        picks = [cl[rng.randrange(2)] for _ in range(2)]
        draws.add(sum(p[0] for p in picks) / sum(p[1] for p in picks))
    assert draws <= {0.0, 0.75, 1.0}


def test_bootstrap_is_seeded():
    pairs = [[i % 2, 1] for i in range(20)]
    clusters = [str(i // 2) for i in range(20)]
    assert stats.cluster_bootstrap(pairs, clusters, seed=1) == \
        stats.cluster_bootstrap(pairs, clusters, seed=1)


def test_zscores_hand_case():
    scores = {"a": {"r1": 1.0, "r2": 0.5, "r3": 1.0},
              "b": {"r1": 0.0, "r2": 0.5},
              "c": {"r1": 0.5, "r2": 0.5}}
    z = stats.zscores(scores)
    sd = math.sqrt(((1 - 0.5) ** 2 + (0 - 0.5) ** 2 + 0) / 3)
    assert z["a"]["mean_z"] == pytest.approx((0.5 / sd + 0.0) / 2)   # r2: all equal -> 0
    assert z["b"]["mean_z"] == pytest.approx((-0.5 / sd + 0.0) / 2)
    assert z["c"]["mean_z"] == pytest.approx(0.0)
    assert z["a"]["n"] == 2   # r3: only one arm ran it


def test_comparison_pairs_put_base_then_rules_second():
    assert comparison_pairs(["base", "student", "rules"]) == [
        ("student", "base"), ("rules", "base"), ("student", "rules")]
    assert comparison_pairs(["rules", "base"]) == [("rules", "base")]
    assert comparison_pairs(["x", "y"]) == [("y", "x")]   # the later arm minus the earlier
