"""Across-seed statistics shared by the dashboard and the report: per-arm summaries with bootstrap CIs, arm vs
baseline tests and effect sizes with Holm, the factorial main effects and interactions, and power."""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import optimize, stats
from statsmodels.stats.power import TTestIndPower

N_RESAMPLES = 2000
CONFIDENCE = 0.95
POWER = 0.8
"""The power a minimum detectable effect, and the seeds a decisive sweep needs, are quoted at."""


class StatsWarning(UserWarning):
    """A statistic left NaN for a reason the reader should see (e.g. an empty cell of a factorial grid)."""


def _clean(values) -> np.ndarray:
    """The values as floats, NaNs (no value) dropped; ±inf is an error, not a value."""
    x = np.asarray(values, dtype=float).ravel()
    _require_finite(x)
    return x[~np.isnan(x)]


def _require_finite(x: np.ndarray) -> None:
    if np.isinf(x).any():
        raise ValueError(
            f"values not finite: {np.unique(x[np.isinf(x)]).tolist()} among {x.size} values "
            "(NaN means no value and is dropped; ±inf is refused)"
        )


def mean_ci(values: np.ndarray | list[float], *, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap CI of the mean over seeds (NaNs dropped; the CI is NaN
    with fewer than two values; ±inf raises ValueError, as in every function here)."""
    x = _clean(values)
    if x.size == 0:
        return (np.nan, np.nan, np.nan)
    if x.size < 2 or np.all(x == x[0]):
        return (float(x.mean()), np.nan, np.nan) if x.size < 2 else (float(x[0]),) * 3
    res = stats.bootstrap(
        (x,), np.mean, n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE, method="percentile", random_state=seed
    )
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

    Also a Welch t-test of the level's runs vs the first level's: two-sided `p` and the t CI of
    the difference, welch_low/welch_high (NaN for the first level or where undefined).

    Rows: factor, level, n, mean, effect (vs the first level), low, high, p, welch_low, welch_high.
    """
    _require_finite(final["value"].to_numpy(float))
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
            low = high = p = wlow = whigh = np.nan
            if lv != levels[0]:
                res = _welch(g, base)
                p = np.nan if res is None else float(res.pvalue)
                wlow, whigh = welch_diff_ci(g, base)
                diffs = rng.choice(g, (N_RESAMPLES, g.size)).mean(1) - rng.choice(base, (N_RESAMPLES, base.size)).mean(
                    1
                )
                low, high = np.quantile(diffs, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
            rows.append(
                {
                    "factor": f,
                    "level": lv,
                    "n": g.size,
                    "mean": g.mean(),
                    "effect": effect,
                    "low": low,
                    "high": high,
                    "p": p,
                    "welch_low": wlow,
                    "welch_high": whigh,
                }
            )
    return pd.DataFrame(
        rows, columns=["factor", "level", "n", "mean", "effect", "low", "high", "p", "welch_low", "welch_high"]
    )


def factorial_effects(
    final: pd.DataFrame, factors: list[str], *, alpha: float = 1 - CONFIDENCE, seed: int = 0
) -> tuple[pd.DataFrame, list[str]]:
    """Each factor's main effect both ways, and the test a reader should use: `main_effects` (two-group
    difference, bootstrap CI, Welch p) merged with the factorial cell-means model (`model_*` columns, its `note`),
    then test_p / test_low / test_high: the model's where it has a test, Welch's where the model has an estimate
    but no variance estimate, nothing where the model has no estimate (empty cells: Welch's groups would be
    just as unbalanced). Also the model's warnings (empty cells), one line each. The report and the dashboard's
    ablation page both show this."""
    effects = main_effects(final, factors, seed=seed)
    design = distinct_factors(final, factors)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StatsWarning)
        model = cell_means_effects(final, design, alpha=alpha)
    notes = [str(w.message) for w in caught if issubclass(w.category, StatsWarning)]
    twins = {f: next(k for k in design if _lockstep(final[k], final[f])) for f in factors if f not in design}
    notes += [f"{f} moves with {lead} (one factor of the design): its test is {lead}'s" for f, lead in twins.items()]
    model = model.rename(
        columns={"effect": "model_effect", "low": "model_low", "high": "model_high", "p": "model_p", "df": "model_df"}
    )
    e = effects.merge(model, on=["factor", "level"], how="left")
    welch = e["model_p"].isna() & e["model_effect"].notna()
    e["test_p"] = e["model_p"].where(~welch, e["p"])
    e["test_low"] = e["model_low"].where(~welch, e["welch_low"])
    e["test_high"] = e["model_high"].where(~welch, e["welch_high"])
    for f, lead in twins.items():  # tested once, as its lead (Holm counts the test once)
        e.loc[e["factor"] == f, "note"] = f"moves with {lead} (one factor of the design): see its test"
    return e, notes


def cell_means_effects(final: pd.DataFrame, factors: list[str], *, alpha: float = 1 - CONFIDENCE) -> pd.DataFrame:
    """Main effects from the full factorial cell-means model y = μ_cell + ε_cell:
    effect(f = l) = mean over cells with f = l of μ_cell − the same at f's first level (unweighted
    marginal means, the classic ANOVA contrast), tested by `cell_contrast` with each cell's own variance and
    Welch–Satterthwaite df (cells' variances are not assumed equal). Unlike a two-group Welch test on all runs,
    the spread the other switches cause is not counted as noise.

    NaN where it cannot be had, with the reason in `note`:
    - a cell the contrast needs is empty (a combination of levels with no run): effect, CI and p are NaN
      and a StatsWarning names the cells. The two marginal means would average over different cells, so
      the other switches' effects would leak into this one (a true +1 can read −0.5). An additive model
      could still estimate it, but only by assuming no interaction, which is what an ablation is there
      to find out; so no number rather than a biased or an assumed one.
    - a cell with one run (no variance estimate for it) or no variance within any cell: the effect, but no CI
      or p (`compare` is NaN in the same case).

    Rows: factor, level, effect, low, high, p, df, note.
    """
    cols = ["factor", "level", "effect", "low", "high", "p", "df", "note"]
    data = final.dropna(subset=["value", *factors])  # a run without the settings (e.g. still starting) has no cell
    _require_finite(data["value"].to_numpy(float))
    if data.empty:
        return pd.DataFrame(columns=cols)
    rows, all_empty = [], []
    for f in factors:
        levels = list(dict.fromkeys(data[f].astype(str)))
        for lv in levels[1:]:
            row = main_effect(data, factors, f, lv, levels[0], alpha=alpha)
            all_empty += [c for c in row.pop("empty") if c not in all_empty]
            rows.append({"factor": f, "level": lv, **{k: row[k] for k in cols[2:]}})
    if all_empty:
        warnings.warn(
            f"empty cells of the factorial grid: {'; '.join(all_empty)}: the main effects that need them are NaN",
            StatsWarning,
            stacklevel=2,
        )
    return pd.DataFrame(rows, columns=cols)


def distinct_factors(final: pd.DataFrame, factors: list[str], first: str | None = None) -> list[str]:
    """`factors` less each one that varies in lockstep with an earlier one (`first` leads): settings a sweep zips
    together (GRPO → Dr. GRPO changes aggregation and advantage at once) are one factor of the design, and as two
    they would leave the cell-means model with empty cells."""
    order = ([first] if first in factors else []) + [f for f in factors if f != first]
    kept: list[str] = []
    for f in order:
        if not any(_lockstep(final[k], final[f]) for k in kept):
            kept.append(f)
    return kept


def _lockstep(a: pd.Series, b: pd.Series) -> bool:
    """Whether each level of `a` comes with one level of `b` and the other way round (as text)."""
    pairs = pd.DataFrame({"a": a.astype(str), "b": b.astype(str)}).drop_duplicates()
    return bool(pairs["a"].is_unique and pairs["b"].is_unique)


def main_effect(
    final: pd.DataFrame,
    factors: list[str],
    factor: str,
    level: str,
    base_level: str,
    *,
    null: float = 0.0,
    alpha: float = 1 - CONFIDENCE,
) -> dict:
    """One main effect of the cell-means model (see `cell_means_effects`): `factor` at `level` minus at
    `base_level` (levels as text), the unweighted mean of its cells' means at each level, tested by
    `cell_contrast` (each cell's own variance, Welch–Satterthwaite df): its t CI and the two-sided p of the test
    that it equals `null`.

    Returns effect, low, high, p, se, df, n (runs at the level), n_base, note (why a NaN), empty (the
    empty cells the contrast needs)."""
    data = final.dropna(subset=["value", *factors])
    y = data["value"].to_numpy(float)
    _require_finite(y)
    keys = data[factors].astype(str)
    out = {
        "effect": np.nan,
        "low": np.nan,
        "high": np.nan,
        "p": np.nan,
        "se": np.nan,
        "df": np.nan,
        "n": int((keys[factor] == level).sum()),
        "n_base": int((keys[factor] == base_level).sum()),
        "note": "",
        "empty": [],
    }
    if data.empty:
        out["note"] = "no runs with a value"
        return out
    cell = keys.agg("\x1f".join, axis=1).to_numpy()
    names = list(dict.fromkeys(cell))
    levels = {f: list(dict.fromkeys(keys[f])) for f in factors}
    for wanted in (level, base_level):
        if wanted not in levels[factor]:
            levels[factor].append(wanted)  # a level with no run: every cell it needs is empty
    out["empty"] = _empty_cells(levels, factor, (base_level, level), set(names))
    if out["empty"]:
        out["note"] = (
            "no estimate: empty cells " + "; ".join(out["empty"]) + " (the marginal means would "
            "average over different cells, mixing in the other switches' effects)"
        )
        return out
    at_level = [n.split("\x1f")[factors.index(factor)] for n in names]
    at, base = (
        [n for n, lv in zip(names, at_level) if lv == level],
        [n for n, lv in zip(names, at_level) if lv == base_level],
    )
    weights = [1 / len(at)] * len(at) + [-1 / len(base)] * len(base)
    res = cell_contrast([y[cell == n] for n in at + base], weights, null=null, alpha=alpha)
    out.update({k: res[k] for k in ("effect", "low", "high", "p", "se", "df")}, note=res["note"])
    return out


def cell_contrast(cells: list, weights: list[float], *, null: float = 0.0, alpha: float = 1 - CONFIDENCE) -> dict:
    """A linear contrast of independent cells' means, Σ c_j·m_j, tested without assuming equal variances:
    SE² = Σ c_j² s_j²/n_j, Welch–Satterthwaite df = SE⁴ / Σ (c_j² s_j²/n_j)²/(n_j − 1), t CI of the estimate and
    two-sided p of (estimate − null)/SE. Two cells with weights (1, −1) give Welch's t-test.

    Why not the pooled within-cell variance: RL seeds spread very differently from cell to cell (one arm's seeds
    diverge, another's agree to a token), and a pooled variance then understates the SE of a contrast that leans
    on a noisy cell (at 3 seeds per cell and SDs 30/7/7/7 a nominal 5% test rejects a true null 9.8% of the time;
    this test 6.1%: Satterthwaite's df is slightly liberal at 2 df per cell, and within about half a point of α
    from 5 seeds per cell on; tests/test_unequal_variances.py).

    NaN (with `note`) where it cannot be had: a weighted cell with no value (no estimate), a weighted cell with
    one value (no variance estimate for it: the estimate, no CI or p), or no variance in any weighted cell.
    Returns effect, low, high, p, se, df, note."""
    out = dict.fromkeys(("effect", "low", "high", "p", "se", "df"), np.nan)
    out["note"] = ""
    c = np.asarray(weights, float)
    x = [_clean(v) for v in cells]
    used = [(w, v) for w, v in zip(c, x) if w != 0]
    if any(v.size == 0 for _, v in used):
        out["note"] = "no value in a cell the contrast needs"
        return out
    out["effect"] = float(sum(w * v.mean() for w, v in used))
    if any(v.size < 2 for _, v in used):
        out["note"] = "no CI or p: a cell has a single run (no variance estimate for it)"
        return out
    parts = np.array([w**2 * v.var(ddof=1) / v.size for w, v in used])
    if parts.sum() == 0:
        out["note"] = "no CI or p: no variance within any cell (every cell's runs have the same value)"
        return out
    se, df = (float(x) for x in satterthwaite(parts, np.array([v.size - 1 for _, v in used])))
    half = stats.t.ppf(1 - alpha / 2, df) * se
    out.update(
        se=se,
        df=float(df),
        low=out["effect"] - half,
        high=out["effect"] + half,
        p=float(2 * stats.t.sf(abs(out["effect"] - null) / se, df)),
    )
    return out


def _empty_cells(levels: dict[str, list[str]], factor: str, at: tuple[str, str], present: set[str]) -> list[str]:
    """The cells (factor at either level × every combination of the other factors' levels) with no run,
    as 'a=x, b=y'."""
    order = list(levels)
    out = []
    for v in at:
        grids = [[v] if f == factor else levels[f] for f in order]
        for combo in itertools.product(*grids):
            if "\x1f".join(combo) not in present:
                out.append(", ".join(f"{f}={x}" for f, x in zip(order, combo)))
    return out


# ---------------------------------------------------------------------------------------------
# Per-arm summaries and arm-vs-baseline comparisons
# ---------------------------------------------------------------------------------------------

EXACT_LIMIT = 100_000  # enumerate every split of the pooled seeds up to this many
PERM_RESAMPLES = 9999
RANK_ARE = 3 / np.pi  # asymptotic relative efficiency of Mann-Whitney / permutation vs the t-test


def _quantiles(draws: np.ndarray, alpha: float) -> tuple[float, float]:
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def describe(values, *, seed: int = 0) -> dict:
    """One arm over seeds: n, mean, sd (ddof=1), median, iqm (25%-trimmed mean), ci_low/ci_high
    (95% percentile bootstrap of the mean, seeded; NaN with n<2) and the values (NaNs dropped)."""
    x = _clean(values)
    n = x.size
    _, low, high = mean_ci(x, seed=seed) if n >= 2 else (np.nan, np.nan, np.nan)
    return {
        "n": n,
        "mean": float(x.mean()) if n else np.nan,
        "sd": float(x.std(ddof=1)) if n >= 2 else np.nan,
        "median": float(np.median(x)) if n else np.nan,
        "iqm": float(stats.trim_mean(x, 0.25)) if n else np.nan,
        "ci_low": low,
        "ci_high": high,
        "values": x.tolist(),
    }


def stratified_mean_ci(strata: dict, *, seed: int = 0, alpha: float = 1 - CONFIDENCE) -> tuple[float, float, float]:
    """Estimate = mean over strata (e.g. benchmarks) of each stratum's mean over seeds, with a
    percentile CI from a stratified bootstrap (seeds resampled within each stratum independently,
    as in rliable). Empty strata are dropped; the CI is NaN if a stratum has fewer than 2 values."""
    groups = [g for g in (_clean(v) for v in strata.values()) if g.size]
    if not groups:
        return (np.nan, np.nan, np.nan)
    est = float(np.mean([g.mean() for g in groups]))
    if min(g.size for g in groups) < 2:
        return (est, np.nan, np.nan)
    rng = np.random.default_rng(seed)
    draws = np.mean([rng.choice(g, (N_RESAMPLES, g.size)).mean(1) for g in groups], axis=0)
    return (est, *_quantiles(draws, alpha))


def _welch(arm: np.ndarray, base: np.ndarray):
    """scipy's Welch t-test, or None where it is undefined (see `_no_test`)."""
    return None if _no_test(arm, base) else stats.ttest_ind(arm, base, equal_var=False)


def _no_test(arm: np.ndarray, base: np.ndarray) -> str:
    """Why two groups have no t-test ('' when they have one): n<2 in a group, or every value of each group
    equal to the others of its group (no variance to estimate the noise from; the exact check, since a
    variance computed of equal values may come out at 1e-34 rather than 0)."""
    if arm.size < 2 or base.size < 2:
        return "fewer than 2 values in a group: no CI or test"
    if np.ptp(arm) == 0 and np.ptp(base) == 0:
        return "no variance within either group: no t-test, t CI or effect size"
    return ""


def welch_diff_ci(arm, base, *, alpha: float = 1 - CONFIDENCE) -> tuple[float, float]:
    """Welch t CI of mean(arm) − mean(base): diff ± t_{1−α/2, ν}·√(s₁²/n₁ + s₂²/n₂), ν by
    Welch–Satterthwaite (NaN where undefined). This is the interval `compare` reports."""
    res = _welch(_clean(arm), _clean(base))
    if res is None:
        return (np.nan, np.nan)
    ci = res.confidence_interval(1 - alpha)
    return float(ci.low), float(ci.high)


def bootstrap_diff_ci(arm, base, *, seed: int = 0, alpha: float = 1 - CONFIDENCE) -> tuple[float, float]:
    """Percentile-bootstrap CI of mean(arm) − mean(base), each group resampled independently
    (seeded; NaN with n<2 in a group). It undercovers at a handful of seeds (tests measure it)."""
    draws = _boot_pairs(_clean(arm), _clean(base), seed)
    if draws is None:
        return (np.nan, np.nan)
    a, b = draws
    return _quantiles(a.mean(1) - b.mean(1), alpha)


def _boot_pairs(arm: np.ndarray, base: np.ndarray, seed: int):
    """N_RESAMPLES seeded resamples of each group, shapes (B, n1) and (B, n2); None if n<2."""
    if arm.size < 2 or base.size < 2:
        return None
    rng = np.random.default_rng(seed)
    return rng.choice(arm, (N_RESAMPLES, arm.size)), rng.choice(base, (N_RESAMPLES, base.size))


def _prob_greater(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(A > B) + ½P(A = B) over all pairs, along the last axis (= U_a / (n_a·n_b))."""
    d = a[..., :, None] - b[..., None, :]
    return ((d > 0) + 0.5 * (d == 0)).mean(axis=(-2, -1))


def _n_splits(n1: int, n2: int) -> int:
    return math.comb(n1 + n2, n1)


def _mannwhitney(arm: np.ndarray, base: np.ndarray):
    """Two-sided Mann–Whitney U. Exact when small: scipy's exact U distribution without ties, the
    exact permutation distribution of U with ties (the tie-corrected normal approximation would
    undercut the smallest attainable p); asymptotic otherwise."""
    ties = np.unique(np.concatenate([arm, base])).size < arm.size + base.size
    method = "auto"
    if ties:
        method = (
            stats.PermutationMethod(n_resamples=np.inf)
            if _n_splits(arm.size, base.size) <= EXACT_LIMIT
            else "asymptotic"
        )
    return stats.mannwhitneyu(arm, base, alternative="two-sided", method=method)


def _permutation_p(arm: np.ndarray, base: np.ndarray, seed: int) -> float:
    """Two-sided permutation p of mean(arm) − mean(base): exact over all C(n1+n2, n1) splits up to
    EXACT_LIMIT, else PERM_RESAMPLES seeded random splits."""
    exact = _n_splits(arm.size, base.size) <= EXACT_LIMIT
    res = stats.permutation_test(
        (arm, base),
        lambda x, y, axis: x.mean(axis) - y.mean(axis),
        vectorized=True,
        n_resamples=np.inf if exact else PERM_RESAMPLES,
        alternative="two-sided",
        rng=seed,
    )
    return float(res.pvalue)


def hedges_g(arm, base, *, alpha: float = 1 - CONFIDENCE) -> tuple[float, float, float]:
    """Hedges' g = J·(m₁ − m₂)/s_pooled, s_pooled² = ((n₁−1)s₁² + (n₂−1)s₂²)/(n₁+n₂−2),
    J = 1 − 3/(4(n₁+n₂)−9); CI g ± z·SE, SE = √((n₁+n₂)/(n₁n₂) + g²/(2(n₁+n₂))) (Hedges & Olkin
    1985). NaN with n<2 in a group or zero pooled SD."""
    a, b = _clean(arm), _clean(base)
    n1, n2 = a.size, b.size
    if n1 < 2 or n2 < 2:
        return (np.nan, np.nan, np.nan)
    sp = math.sqrt(((n1 - 1) * a.var(ddof=1) + (n2 - 1) * b.var(ddof=1)) / (n1 + n2 - 2))
    if sp == 0:
        return (np.nan, np.nan, np.nan)
    g = (1 - 3 / (4 * (n1 + n2) - 9)) * (a.mean() - b.mean()) / sp
    se = math.sqrt((n1 + n2) / (n1 * n2) + g**2 / (2 * (n1 + n2)))
    z = stats.norm.ppf(1 - alpha / 2)
    return (float(g), float(g - z * se), float(g + z * se))


def compare(arm, base, *, seed: int = 0, alpha: float = 1 - CONFIDENCE) -> dict:
    """Arm vs baseline over independent seeds (NaNs dropped): diff of means with Welch t CI/t/df/p
    and percentile-bootstrap CI; Mann–Whitney U/p; permutation p of the mean difference; probability
    of improvement P(arm > base) + ½P(=) = U/(n₁n₂) with bootstrap CI; Hedges' g with CI; n1, n2.
    Tests and CIs need n>=2 in each group, Welch and g some variance: otherwise NaN, nothing raises, and
    `note` says why ('' when nothing is missing). ±inf raises ValueError."""
    a, b = _clean(arm), _clean(base)
    out = dict.fromkeys(
        [
            "diff",
            "welch_low",
            "welch_high",
            "welch_t",
            "welch_df",
            "welch_p",
            "boot_low",
            "boot_high",
            "mwu_u",
            "mwu_p",
            "perm_p",
            "p_improve",
            "p_improve_low",
            "p_improve_high",
            "hedges_g",
            "g_low",
            "g_high",
        ],
        np.nan,
    )
    out.update(n1=a.size, n2=b.size, note="no value in a group" if not (a.size and b.size) else _no_test(a, b))
    if not (a.size and b.size):
        return out
    out["diff"] = float(a.mean() - b.mean())
    res = _welch(a, b)
    if res is not None:
        out.update(welch_t=float(res.statistic), welch_df=float(res.df), welch_p=float(res.pvalue))
    out["welch_low"], out["welch_high"] = welch_diff_ci(a, b, alpha=alpha)
    out["boot_low"], out["boot_high"] = bootstrap_diff_ci(a, b, seed=seed, alpha=alpha)
    out["p_improve"] = float(_prob_greater(a, b))
    draws = _boot_pairs(a, b, seed)
    if draws is not None:  # rank and permutation tests too need n >= 2 in each group
        mwu = _mannwhitney(a, b)
        out.update(mwu_u=float(mwu.statistic), mwu_p=float(mwu.pvalue), perm_p=_permutation_p(a, b, seed))
        out["p_improve_low"], out["p_improve_high"] = _quantiles(_prob_greater(*draws), alpha)
    out["hedges_g"], out["g_low"], out["g_high"] = hedges_g(a, b, alpha=alpha)
    return out


# ---------------------------------------------------------------------------------------------
# Power and multiplicity
# ---------------------------------------------------------------------------------------------

RANK_TESTS = ("mannwhitney", "permutation")


def min_p_value(test: str, n1: int, n2: int) -> float:
    """Smallest two-sided p a test can ever give at these sizes: 0 for "welch" (continuous);
    2/C(n1+n2, n1) (capped at 1) for "mannwhitney" and "permutation" — the observed split is one of
    C(n1+n2, n1) equally likely ones, doubled for two sides (3+3 seeds: 0.10; 4+4: 0.029; 5+5: 0.008)."""
    if test == "welch":
        return 0.0
    if test in RANK_TESTS:
        return min(1.0, 2 / _n_splits(n1, n2))
    raise ValueError(f"unknown test {test!r}: expected 'welch', 'mannwhitney' or 'permutation'")


def min_detectable_effect(
    n1: int, n2: int, sd: float, *, alpha: float = 0.05, power: float = 0.8, test: str = "welch"
) -> float:
    """Smallest true difference (metric units) detected with probability `power` at level `alpha`, with the
    same SD `sd` in both arms: d·sd, where d solves the power equation of the test itself.

    "welch": the exact power of Welch's test, whose df is estimated from the two sample variances (see
    `welch_power`); larger than the pooled t-test's d (5 vs 5 seeds: 2.084 against 2.024).
    "mannwhitney" / "permutation": the pooled two-sample t-test's d (statsmodels TTestIndPower) divided by
    √(3/π), the asymptotic relative efficiency of rank tests vs the t-test (optimistic at small n).
    inf when the test can never reach `alpha` (min_p_value > alpha); NaN for n<2 or sd NaN; ValueError
    for sd < 0 or infinite."""
    if sd is not None and not np.isnan(sd) and not 0 <= sd < math.inf:
        raise ValueError(f"sd must be a finite number >= 0, got {sd}")
    if n1 < 2 or n2 < 2 or sd is None or np.isnan(sd):
        return np.nan
    if min_p_value(test, n1, n2) > alpha:
        return math.inf
    if test == "welch":
        return _welch_mde(int(n1), int(n2), float(alpha), float(power)) * float(sd)
    d = TTestIndPower().solve_power(
        effect_size=None, nobs1=n1, ratio=n2 / n1, alpha=alpha, power=power, alternative="two-sided"
    )
    return float(np.asarray(d).item()) / math.sqrt(RANK_ARE) * float(sd)


WELCH_NODES = 64  # Gauss–Legendre nodes per sample variance: d to ~1e-5 (5 vs 5: 2.08429 at 64, 2.08430 at 256)


@functools.lru_cache(maxsize=256)
def _welch_critical(n1: int, n2: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature over the two sample variances (in units of σ²): weights and Welch's rejection threshold
    on |mean difference|, t_{1−α/2, ν̂}·√(s₁²/n₁ + s₂²/n₂), ν̂ by Welch–Satterthwaite from s₁², s₂²."""
    x, w = np.polynomial.legendre.leggauss(WELCH_NODES)
    u, w = (x + 1) / 2, w / 2  # nodes on the probability scale of each χ²
    v1 = stats.chi2.ppf(u, n1 - 1)[:, None] / (n1 - 1) / n1  # s₁²/n₁ with s₁² = σ²χ²_{n₁−1}/(n₁−1)
    v2 = stats.chi2.ppf(u, n2 - 1)[None, :] / (n2 - 1) / n2
    df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
    return (w[:, None] * w[None, :]).ravel(), (stats.t.ppf(1 - alpha / 2, df) * np.sqrt(v1 + v2)).ravel()


def welch_power(delta: float, n1: int, n2: int, *, alpha: float = 0.05) -> float:
    """Power of the two-sided Welch t-test for a true difference of `delta` SDs, both arms normal with
    the same SD: E over the sample variances of P(|D| > threshold), D ~ N(δ, 1/n₁ + 1/n₂) independent of
    them (normal samples). Checked against simulation in the tests."""
    w, c = _welch_critical(int(n1), int(n2), float(alpha))
    tau = math.sqrt(1 / n1 + 1 / n2)
    return float(w @ (stats.norm.sf((c - delta) / tau) + stats.norm.cdf((-c - delta) / tau)))


@functools.lru_cache(maxsize=256)
def _welch_mde(n1: int, n2: int, alpha: float, power: float) -> float:
    return float(optimize.brentq(lambda d: welch_power(d, n1, n2, alpha=alpha) - power, 0.0, 100.0, xtol=1e-8))


def satterthwaite(parts: np.ndarray, dof: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SE and Welch–Satterthwaite df of a sum of independent variance terms parts_j = c_j² s_j²/n_j, each
    estimated on dof_j = n_j − 1 degrees of freedom: SE = √Σ parts, df = (Σ parts)² / Σ parts²/dof. Vectorised over
    leading axes of `parts` (the last axis is the cells), so a simulation tests the formula the claims use."""
    total = np.sum(parts, axis=-1)
    return np.sqrt(total), total**2 / np.sum(parts**2 / dof, axis=-1)


def contrast(arm, base, *, fold: float = 1.0, null: float = 0.0, alpha: float = 1 - CONFIDENCE) -> dict:
    """Welch's test of mean(arm) − fold·mean(base) against `null` (`cell_contrast` on two cells, weights 1 and
    −fold): SE = √(s₁²/n₁ + fold²·s₂²/n₂), Welch–Satterthwaite df. With fold 1 and null 0 it is
    `scipy.stats.ttest_ind(equal_var=False)`. Returns effect, low, high, p, se, df, n1, n2, note."""
    a, b = _clean(arm), _clean(base)
    return {**cell_contrast([a, b], [1.0, -fold], null=null, alpha=alpha), "n1": a.size, "n2": b.size}


def t_power(delta: float, se: float, df: float, *, alpha: float = 0.05) -> float:
    """Power of a two-sided t-test of an estimate with standard error `se` and `df` degrees of freedom
    when the true value is `delta` away from the null: the noncentral t's mass beyond ±t_{1−α/2, df}."""
    crit, nc = stats.t.ppf(1 - alpha / 2, df), delta / se
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if np.isnan(power):  # scipy's noncentral t fails far in the tail: the shifted central t is exact enough there
        power = float(stats.t.sf(crit - nc, df) + stats.t.cdf(-crit - nc, df))
    return power


def t_mde(se: float, df: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true distance from the null such a test detects with probability `power`."""
    if not (se > 0 and df > 0):
        return np.nan
    return float(optimize.brentq(lambda d: t_power(d, se, df, alpha=alpha) - power, 0.0, 100 * se + 1e-12))


def seeds_needed(
    delta: float, se: float, df: float, seeds: int, *, alpha: float = 0.05, power: float = 0.8, limit: int = 1000
) -> int | None:
    """Seeds per arm (or per cell) to detect a true `delta` with probability `power`, from the standard error
    `se` and `df` measured at `seeds` seeds: SE scales as √(seeds/m) and df as m/seeds (every run adds
    information alike). None when more than `limit` seeds would be needed or nothing can be said."""
    if not (se > 0 and df > 0 and seeds > 0 and delta != 0 and np.isfinite(delta)):
        return None

    def enough(m: int) -> bool:
        return t_power(abs(delta), se * math.sqrt(seeds / m), df * m / seeds, alpha=alpha) >= power

    if not enough(limit):
        return None
    low, high = 1, limit  # enough(high); find the smallest such m
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return max(high, 2)


def holm(pvalues) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values: sorted p₍ᵢ₎ × (m − i + 1), made monotone by a running max,
    capped at 1 (the tests check it equals statsmodels' multipletests, which is not called because it runs a
    full gc.collect() per call: 0.2 s in a large process). NaNs stay NaN and are not counted in the family m;
    a p outside [0, 1] is a ValueError."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ((p[ok] < 0) | (p[ok] > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {p[ok][(p[ok] < 0) | (p[ok] > 1)].tolist()}")
    if ok.any():
        q = p[ok]
        order = np.argsort(q, kind="stable")
        adjusted = np.minimum(1.0, np.maximum.accumulate(q[order] * np.arange(q.size, 0, -1)))
        out[np.flatnonzero(ok)[order]] = adjusted
    return out


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini–Hochberg q-values (false-discovery rate): sorted p₍ᵢ₎ × m / i, made monotone from the largest
    down by a running min, capped at 1; NaNs stay NaN and are not counted in m (as `holm`, checked against
    statsmodels' multipletests(method="fdr_bh") in the tests)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        q = p[ok]
        order = np.argsort(q, kind="stable")
        ranked = q[order] * q.size / np.arange(1, q.size + 1)
        out[np.flatnonzero(ok)[order]] = np.minimum(1.0, np.minimum.accumulate(ranked[::-1])[::-1])
    return out


# ---------------------------------------------------------------------------------------------
# Two-way interactions of a factorial sweep
# ---------------------------------------------------------------------------------------------


def _levels(final: pd.DataFrame, factor: str) -> list[str]:
    return list(dict.fromkeys(final[factor].astype(str)))


def _interaction(cells: list[np.ndarray], alpha: float) -> dict:
    """2×2 contrast over cells [a0b0, a1b0, a0b1, a1b1]: (m₁₁ − m₀₁) − (m₁₀ − m₀₀), by `cell_contrast`."""
    res = cell_contrast(cells, [1.0, -1.0, -1.0, 1.0], alpha=alpha)
    return {"estimate": res["effect"], **{k: res[k] for k in ("low", "high", "p")}, "n_min": min(c.size for c in cells)}


def interactions(final: pd.DataFrame, factors: list[str], *, alpha: float = 1 - CONFIDENCE) -> pd.DataFrame:
    """Two-way interaction of every pair of two-level factors (levels in order of first appearance,
    the first is the baseline) on `final['value']`, one row per run: the difference-in-differences of
    cell means (m₁₁ − m₀₁) − (m₁₀ − m₀₀) with a Welch t CI and two-sided p (NaN where a cell has
    fewer than 2 runs; estimate NaN too where a cell is empty).

    Rows: factor_a, factor_b, level_a, level_b (the non-baseline levels), estimate, low, high, p, n_min.
    """
    cols = ["factor_a", "factor_b", "level_a", "level_b", "estimate", "low", "high", "p", "n_min"]
    _require_finite(final["value"].to_numpy(float))
    two = [f for f in factors if len(_levels(final, f)) == 2]
    rows = []
    for fa, fb in itertools.combinations(two, 2):
        la, lb = _levels(final, fa), _levels(final, fb)
        a, b = final[fa].astype(str), final[fb].astype(str)
        cells = [
            final.loc[(a == la[i]) & (b == lb[j]), "value"].dropna().to_numpy(float) for j in (0, 1) for i in (0, 1)
        ]  # a0b0, a1b0, a0b1, a1b1
        rows.append({"factor_a": fa, "factor_b": fb, "level_a": la[1], "level_b": lb[1], **_interaction(cells, alpha)})
    return pd.DataFrame(rows, columns=cols)
