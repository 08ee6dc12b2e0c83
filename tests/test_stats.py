"""Across-seed statistics against hand-computed numbers."""

import numpy as np
import pandas as pd
import pytest

from harness.stats import bootstrap_band, ema, main_effects, mean_ci


def test_bootstrap_band_two_seeds_spans_both():
    # two seeds 0 and 2: resampled means are 0, 1, 2 with probability 1/4, 1/2, 1/4, so the 95% band is [0, 2]
    band = bootstrap_band(pd.DataFrame({"a": [0.0, 5.0, np.nan], "b": [2.0, 5.0, 4.0]}, index=[1, 2, 3]))
    assert band.loc[1].tolist() == [1.0, 0.0, 2.0, 2]
    assert band.loc[2].tolist() == [5.0, 5.0, 5.0, 2]  # identical seeds: no spread
    assert band.loc[3, "mean"] == 4.0 and np.isnan(band.loc[3, "low"]) and band.loc[3, "n"] == 1


def test_bootstrap_band_one_seed_has_no_band():
    band = bootstrap_band(pd.DataFrame({"a": [1.0, 2.0]}))
    assert band["mean"].tolist() == [1.0, 2.0] and band["low"].isna().all()


def test_mean_ci():
    m, lo, hi = mean_ci([1.0, 2.0, 3.0, 4.0, np.nan])
    assert m == 2.5 and 1.0 <= lo < 2.5 < hi <= 4.0
    assert mean_ci([3.0, 3.0]) == (3.0, 3.0, 3.0)
    m, lo, hi = mean_ci([7.0])
    assert m == 7.0 and np.isnan(lo) and np.isnan(hi)


def test_ema():
    s = pd.Series([0.0, 1.0, 1.0])
    assert ema(s, 0.5).tolist() == [0.0, 0.5, 0.75]
    assert ema(s, 1.0).tolist() == s.tolist()


def test_main_effects_balanced_2x2():
    # value = 10·[agg=constant] + 1·[adv=group_mean] + seed noise that cancels within levels
    rows = [{"agg": a, "adv": d, "value": 10 * (a == "constant") + (d == "group_mean") + e}
            for a in ("seq", "constant") for d in ("group_std", "group_mean") for e in (-0.5, 0.5)]
    eff = main_effects(pd.DataFrame(rows), ["agg", "adv"]).set_index(["factor", "level"])
    assert eff.loc[("agg", "constant"), "effect"] == pytest.approx(10.0)
    assert eff.loc[("adv", "group_mean"), "effect"] == pytest.approx(1.0)
    assert eff.loc[("agg", "seq"), "effect"] == 0.0 and np.isnan(eff.loc[("agg", "seq"), "low"])
    assert eff.loc[("agg", "constant"), "low"] < 10.0 < eff.loc[("agg", "constant"), "high"]
    assert eff.loc[("agg", "constant"), "n"] == 4
