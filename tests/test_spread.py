"""Spread across base models against spread across RL seeds: paired effects and the F test, by hand."""

import math

import pandas as pd
import pytest

from harness.analysis.spread import Spread, compare_spread, paired_effects


def test_paired_effects_pair_runs_by_seed_and_drop_unpaired_seeds():
    values = pd.DataFrame(
        {
            "seed": [1, 2, 3, 1, 2, 4],
            "objective.aggregation": ["a", "a", "a", "b", "b", "b"],
            "value": [10.0, 20.0, 30.0, 4.0, 25.0, 7.0],
        }
    )
    s = paired_effects(values, {"objective.aggregation": "a"}, {"objective.aggregation": "b"}, "x")
    assert s.effects == (6.0, -5.0) and s.n == 2 and s.mean == 0.5
    assert s.sd == pytest.approx(math.sqrt(((6 - 0.5) ** 2 + (-5 - 0.5) ** 2) / 1))


def test_the_variance_ratio_its_f_interval_and_test():
    # var (0, 10, 20) = 100, var (0, 5, 10) = 25: ratio 4 on (2, 2) df, where F's cdf is x / (1 + x) and its
    # quantile q / (1 - q): p = 2 * (1 - 4/5) = 0.4, interval (4/39, 4/(0.025/0.975)) = (0.1026, 156)
    out = compare_spread(Spread("builds", (0.0, 10.0, 20.0)), Spread("seeds", (0.0, 5.0, 10.0)))
    assert out.ratio == pytest.approx(4.0) and out.p == pytest.approx(0.4)
    assert out.ci == pytest.approx((4 / 39, 156.0))
    assert out.build_sd == pytest.approx(math.sqrt(75))
    less = compare_spread(Spread("builds", (0.0, 5.0, 10.0)), Spread("seeds", (0.0, 10.0, 20.0)))
    assert less.ratio == pytest.approx(0.25) and less.p == pytest.approx(0.4) and less.build_sd == 0.0


def test_one_replicate_is_refused():
    with pytest.raises(ValueError, match="two replicates"):
        compare_spread(Spread("builds", (1.0,)), Spread("seeds", (0.0, 1.0)))
