"""Across-seed statistics shared by the dashboard and the report (GUIDE §5)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

N_RESAMPLES = 2000
CONFIDENCE = 0.95


def mean_ci(values: np.ndarray | list[float], *, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap CI of the mean over seeds (NaNs dropped; the CI is NaN
    with fewer than two values)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return (np.nan, np.nan, np.nan)
    if x.size < 2 or np.all(x == x[0]):
        return (float(x.mean()), np.nan, np.nan) if x.size < 2 else (float(x[0]),) * 3
    res = stats.bootstrap((x,), np.mean, n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                          method="percentile", random_state=seed)
    return float(x.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)


def bootstrap_band(curves: pd.DataFrame, *, seed: int = 0) -> pd.DataFrame:
    """Mean over seeds at each x with a 95% percentile-bootstrap band: `curves` is (x × seeds), NaN
    where a seed has no point; returns columns mean, low, high, n (seeds with a point).

    Seeds are resampled with replacement (one draw per resample shared by every x, so the band
    keeps the seeds' correlation over time); the band is NaN where fewer than two seeds have a point.
    """
    v = curves.to_numpy(dtype=float)  # (x, k)
    n = (~np.isnan(v)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(np.where(n[:, None] > 0, v, 0.0), axis=1)
    mean[n == 0] = np.nan
    out = pd.DataFrame({"mean": mean, "low": np.nan, "high": np.nan, "n": n}, index=curves.index)
    k = v.shape[1]
    if k < 2 or v.shape[0] == 0:
        return out
    idx = np.random.default_rng(seed).integers(0, k, size=(N_RESAMPLES, k))
    draws = v[:, idx]  # (x, B, k)
    with warnings.catch_warnings():  # all-NaN slices (no seed at that x in a resample) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(draws, axis=2)  # (x, B)
        alpha = (1 - CONFIDENCE) / 2
        low, high = np.nanquantile(means, [alpha, 1 - alpha], axis=1)
    ok = n >= 2
    out.loc[ok, "low"], out.loc[ok, "high"] = low[ok], high[ok]
    return out


def ema(curve: pd.Series, alpha: float) -> pd.Series:
    """Exponential moving average y_t = α·x_t + (1-α)·y_{t-1} (α=1: no smoothing), ignoring gaps."""
    return curve.ewm(alpha=alpha, adjust=False, ignore_na=True).mean() if alpha < 1 else curve


def main_effects(final: pd.DataFrame, factors: list[str], *, seed: int = 0) -> pd.DataFrame:
    """Main effect of each factor of a factorial sweep on `final['value']`: the mean over all runs at
    a level (which averages over the other factors in a balanced grid) minus the mean at the factor's
    first level, with a 95% bootstrap CI that resamples runs within each of the two levels.

    Rows: factor, level, n, mean, effect (vs the first level), low, high.
    """
    rows = []
    rng = np.random.default_rng(seed)
    for f in factors:
        levels = list(dict.fromkeys(final[f].astype(str)))
        if len(levels) < 2:
            continue
        groups = {lv: final.loc[final[f].astype(str) == lv, "value"].dropna().to_numpy(float) for lv in levels}
        groups = {lv: g for lv, g in groups.items() if g.size}
        levels = [lv for lv in levels if lv in groups]
        if len(levels) < 2:
            continue
        base = groups[levels[0]]
        for lv in levels:
            g = groups[lv]
            effect = g.mean() - base.mean()
            if lv == levels[0]:
                low = high = np.nan
            else:
                diffs = (rng.choice(g, (N_RESAMPLES, g.size)).mean(1) - rng.choice(base, (N_RESAMPLES, base.size)).mean(1))
                low, high = np.quantile(diffs, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
            rows.append({"factor": f, "level": lv, "n": g.size, "mean": g.mean(), "effect": effect,
                         "low": low, "high": high})
    return pd.DataFrame(rows, columns=["factor", "level", "n", "mean", "effect", "low", "high"])
