"""Every number of the report, computed once from a sweep; the renderers only format them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.analysis.claims import Verdict, judge
from harness.analysis.sequential import Record
from harness.analysis.takeoff import ArmTakeoff, takeoff_by_arm
from harness.analysis.values import run_values
from harness.config.at import DEFAULT_AT, At
from harness.config.claims import Claim
from harness.config.errors import ConfigError
from harness.runs.sweep_data import FailedRun, MachineRuns, SweepData
from trainer import metric_names as M

# the length-bias question's metrics: does the normaliser lengthen incorrect (and correct) responses, at what cost
DEFAULT_METRICS = (M.LENGTH_INCORRECT_MEAN, M.LENGTH_CORRECT_MEAN, M.ACCURACY, M.REWARD_MEAN, M.ENTROPY)
TESTS = {
    "welch": ("welch_p", "Welch's t-test"),
    "mannwhitney": ("mwu_p", "Mann–Whitney U"),
    "permutation": ("perm_p", "exact permutation test of the mean difference"),
}
PER_ARM_COLUMNS = ["metric", "arm", "failed", "n", "mean", "sd", "median", "iqm", "ci_low", "ci_high", "values"]


@dataclass(frozen=True)
class Header:
    """Who, when, where and how much: the sweep, its code version and seeds, its jobs by state, its compute and the
    machines it ran on."""

    sweep: str
    sweep_id: str
    experiment: str
    code_version: list[str]
    """The git commits its runs logged (["unknown"] when none did)."""
    seeds: list[int]
    runs: int
    jobs: int
    """Jobs with a run or a plan (`SweepData.jobs`)."""
    planned: int
    """Jobs in the recorded plan (0 for a sweep run before harness recorded it)."""
    finished: int
    failed: int
    """Jobs whose every run failed."""
    failed_runs: int
    retried: int
    """Failed attempts of jobs that a later attempt finished (history, not failures)."""
    running: int
    never_started: int
    failures: list[FailedRun]
    """Each failed run of a job that never finished, with its reason."""
    never_started_jobs: list[tuple[str, int]]
    """(arm, seed) of each planned job with no run."""
    compute_hours: float
    wall_clock_hours: float
    started: str
    machines: list[MachineRuns] = field(default_factory=list)
    """The distinct machines its runs computed on (CPU, capability, torch, threads, base model), runs each."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["never_started_jobs"] = [{"arm": arm, "seed": seed} for arm, seed in self.never_started_jobs]
        return out


@dataclass(frozen=True)
class Settings:
    """How the report computed what it shows."""

    metrics: list[str]
    at: str
    """A run's value, described (`At.describe`)."""
    baseline: str | None
    test: str
    """A key of `TESTS`."""
    alpha: float
    seed: int
    """Of the bootstrap."""
    power: float
    resamples: int
    cumulative: bool
    factors: list[str]

    @property
    def test_name(self) -> str:
        return TESTS[self.test][1]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "test_name": self.test_name}


@dataclass
class Report:
    """A sweep's across-seed statistics."""

    header: Header
    settings: Settings
    arms: pd.DataFrame
    """arm, arm_id, seeds (finished), failed, config hashes."""
    per_arm: pd.DataFrame
    """metric, arm, n, failed, mean, sd, median, iqm, ci_low, ci_high, values."""
    comparisons: pd.DataFrame
    """metric, arm, baseline, n1, n2, diff, Welch/bootstrap CIs, p-values, p (chosen test), p_holm, effect sizes,
    mde."""
    effects: pd.DataFrame
    """metric, factor, level, n, mean, effect, CIs, p, p_holm (factorial sweeps)."""
    interactions: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    curves: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)
    """metric → arm → (steps × seeds), for the learning-curve figures."""
    verdicts: list[Verdict] = field(default_factory=list)
    """The sweep's claims judged (harness.analysis.claims), shown first."""
    sequential: Record | None = None
    """A `--until-decided` sweep's record: its verdicts of record."""
    takeoff: list[ArmTakeoff] = field(default_factory=list)
    """When each arm's incorrect responses took off (`harness.analysis.takeoff`); empty when no run recorded it."""


def build(
    data: SweepData,
    *,
    metrics: list[str] | None = None,
    at: At | None = None,
    baseline: str | None = None,
    test: str = "welch",
    alpha: float = 0.05,
    seed: int = 0,
    claims: list[Claim] | None = None,
    sequential: Record | None = None,
) -> Report:
    at = at or At.parse(DEFAULT_AT)
    header = _header(data)
    if not header.finished:  # nothing to compare: say which jobs failed and why, and compute nothing
        return _without_statistics(data, header, at, test, alpha, seed, claims or [], sequential)
    metrics = [m for m in (metrics or DEFAULT_METRICS)]
    missing = [m for m in metrics if m not in data.keys]
    metrics = [m for m in metrics if m in data.keys]
    base = _baseline(data, baseline)
    warnings = [*data.warnings, *(f"metric {m} is not logged by any run of this sweep: left out" for m in missing)]
    if at.kind == "best":
        warnings.append("--at best picks each run's maximum over training: optimistic, and biased towards noisy arms.")
    values = {m: run_values(data, m, at) for m in metrics}

    per_arm = _per_arm(data, values, seed)
    comparisons, more = _comparisons(data, values, base, test, alpha, seed)
    warnings += more
    effects, inter, more = _factorial(data, values, alpha, seed)
    warnings += more
    report = Report(
        header=header,
        arms=_arms(data),
        settings=_settings(data, metrics, at, base, test, alpha, seed),
        per_arm=per_arm,
        comparisons=comparisons,
        effects=effects,
        interactions=inter,
        warnings=warnings,
        curves={m: data.by_arm(m, only=values[m]["run_id"]) for m in metrics},
    )  # the runs counted
    report.findings = _findings(report)
    report.takeoff = [a for a in takeoff_by_arm(data) if a.runs > a.unrecorded]
    report.verdicts = judge(data, claims, alpha=alpha) if claims else []
    report.sequential = sequential
    return report


def _settings(data: SweepData, metrics: list[str], at: At, base, test: str, alpha: float, seed: int) -> Settings:
    return Settings(
        metrics,
        at.describe(),
        base,
        test,
        alpha,
        seed,
        stats.POWER,
        stats.N_RESAMPLES,
        data.cumulative,
        list(data.varying),
    )


def _without_statistics(
    data: SweepData,
    header: Header,
    at: At,
    test: str,
    alpha: float,
    seed: int,
    claims: list[Claim],
    sequential: Record | None,
) -> Report:
    """The report of a sweep with no finished run: its header (planned, failed and never-started jobs, each failed
    run with its reason), its arms, one finding that says so, and no statistics, curves or verdicts."""
    finding = f"No run of this sweep has finished ({data.jobs.line()}): no statistics"
    if claims:
        ids, n = ", ".join(c.id for c in claims), len(claims)
        finding += f", and its {n} claim{'s' if n != 1 else ''} ({ids}) cannot be judged"
    return Report(
        header=header,
        settings=_settings(data, [], at, None, test, alpha, seed),
        arms=_arms(data),
        per_arm=pd.DataFrame(columns=PER_ARM_COLUMNS),
        comparisons=pd.DataFrame(),
        effects=pd.DataFrame(),
        interactions=pd.DataFrame(),
        warnings=list(data.warnings),
        findings=[finding + "."],
        sequential=sequential,
    )


def _baseline(data: SweepData, wanted: str | None) -> str | None:
    if wanted is None:
        return data.arms[0] if data.arms else None
    if wanted in data.arms:
        return wanted
    hits = [a for a in data.arms if wanted in a]
    if len(hits) == 1:
        return hits[0]
    raise ConfigError(
        f"--baseline: {wanted!r} {'matches several arms' if hits else 'is not an arm'} (arms: {'; '.join(data.arms)})"
    )


def _header(data: SweepData) -> Header:
    """Who, when and how much. Jobs are counted by `SweepData.jobs`: a failed attempt of a job that a later invocation
    finished is history (`retried`), not a failure; `failures` lists each failed run of a job that never finished,
    with its reason, and `never_started` each planned job with no run. The start is the sweep's first (its parent's
    original start or its earliest run), not a resume's."""
    runs, sweep, jobs = data.runs, data.sweep, data.jobs
    done = runs[runs["state"] == "done"]
    secs = ((done["end_time"] - done["start_time"]) / 1000).sum()
    parent = [sweep.parent["start_time"]] if sweep.parent is not None else []
    starts = pd.to_numeric(pd.concat([runs["start_time"], pd.Series(parent, dtype=float)]), errors="coerce").dropna()
    times = pd.concat([starts, pd.to_numeric(runs["end_time"], errors="coerce")]).dropna()
    commits = sorted(set(runs.get("git_commit", pd.Series(dtype=str)).dropna()) - {""})
    return Header(
        sweep=sweep.name,
        sweep_id=sweep.sweep_id,
        experiment=sweep.experiment,
        code_version=commits or ["unknown"],
        seeds=sorted(int(s) for s in runs["seed"].unique() if s >= 0),
        runs=len(runs),
        jobs=jobs.total,
        planned=len({j["job_id"] for j in data.planned}),
        finished=jobs.finished,
        failed=jobs.failed,
        failed_runs=len(jobs.failed_runs),
        retried=int((runs["state"] == "retried").sum()),
        running=jobs.running,
        never_started=jobs.missing,
        failures=list(jobs.failed_runs),
        never_started_jobs=list(jobs.missing_jobs),
        compute_hours=float(secs) / 3600,
        wall_clock_hours=float((times.max() - times.min()) / 3.6e6) if len(times) else 0.0,
        started=f"{pd.to_datetime(starts.min(), unit='ms'):%Y-%m-%d %H:%M} UTC" if len(starts) else "",
        machines=data.machines,
    )


def _arms(data: SweepData) -> pd.DataFrame:
    rows = []
    for arm in data.arms:
        runs = data.runs[data.runs["arm"] == arm]
        rows.append(
            {
                "arm": arm,
                "arm_id": ", ".join(sorted(set(runs["arm_id"].dropna().astype(str)))),
                "seeds": sorted(int(s) for s in runs.loc[runs["state"] == "done", "seed"]),
                "failed": sorted(int(s) for s in runs.loc[runs["state"] == "failed", "seed"]),
                "config_hashes": sorted(set(runs.get("config_hash", pd.Series(dtype=str)).dropna())),
            }
        )
    return pd.DataFrame(rows, columns=["arm", "arm_id", "seeds", "failed", "config_hashes"])


def _per_arm(data: SweepData, values: dict[str, pd.DataFrame], seed: int) -> pd.DataFrame:
    rows = []
    for metric, vals in values.items():
        for arm in data.arms:
            runs = data.runs[data.runs["arm"] == arm]
            d = stats.describe(vals.loc[vals["arm"] == arm].sort_values("seed")["value"], seed=seed)
            rows.append({"metric": metric, "arm": arm, "failed": int((runs["state"] == "failed").sum()), **d})
    rows += _stratified(data, values, seed)
    return pd.DataFrame(rows, columns=PER_ARM_COLUMNS)


def _stratified(data: SweepData, values: dict[str, pd.DataFrame], seed: int) -> list[dict]:
    """With several benchmarks, their mean with a bootstrap stratified by benchmark."""
    benches = [m for m in values if m.startswith("eval/") and m.endswith("/accuracy")]
    if len(benches) < 2:
        return []
    rows = []
    for arm in data.arms:
        strata = {b: values[b].loc[values[b]["arm"] == arm, "value"].to_numpy() for b in benches}
        est, low, high = stats.stratified_mean_ci(strata, seed=seed)
        rows.append(
            {
                "metric": f"eval/mean of {len(benches)}/accuracy",
                "arm": arm,
                "failed": 0,
                "n": min(len(v) for v in strata.values()),
                "mean": est,
                "ci_low": low,
                "ci_high": high,
                "values": [],
            }
        )
    return rows


def _comparisons(
    data: SweepData, values: dict[str, pd.DataFrame], base: str, test: str, alpha: float, seed: int
) -> tuple[pd.DataFrame, list[str]]:
    rows, warnings = [], []
    for metric, vals in values.items():
        b = vals.loc[vals["arm"] == base, "value"].to_numpy()
        for arm in data.arms:
            if arm == base:
                continue
            a = vals.loc[vals["arm"] == arm, "value"].to_numpy()
            c = stats.compare(a, b, seed=seed, alpha=alpha)
            sd = _pooled_sd(a, b)
            c.update(
                {
                    "metric": metric,
                    "arm": arm,
                    "baseline": base,
                    "p": c[TESTS[test][0]],
                    "min_p": stats.min_p_value(test, len(a), len(b)),
                    "mde": stats.min_detectable_effect(len(a), len(b), sd, alpha=alpha, power=stats.POWER, test=test),
                }
            )
            rows.append(c)
    table = pd.DataFrame(rows)
    if table.empty:
        return table, warnings
    table["p_holm"] = stats.holm(table["p"].to_numpy())
    for (n1, n2), _ in table.groupby(["n1", "n2"]):
        floor = stats.min_p_value(test, int(n1), int(n2))
        if floor > alpha:
            warnings.append(
                f"With {int(n1)} vs {int(n2)} seeds the {TESTS[test][1]} can never give p < {alpha}: "
                f"its smallest two-sided p is {floor:.3g}. Add seeds, or use --test welch."
            )
    if (table[["n1", "n2"]] < 2).any(axis=None):
        warnings.append("Some arm has fewer than 2 finished seeds: no spread, CI or test for it.")
    return table, warnings


def _pooled_sd(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    return float(np.sqrt(((len(a) - 1) * np.var(a, ddof=1) + (len(b) - 1) * np.var(b, ddof=1)) / (len(a) + len(b) - 2)))


def _factorial(
    data: SweepData, values: dict[str, pd.DataFrame], alpha: float, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Main effects and two-way interactions, for grid sweeps (not for a cumulative progression), and the
    warnings of the statistics (empty cells)."""
    if data.cumulative or not data.varying:
        return pd.DataFrame(), pd.DataFrame(), []
    effects, inter, notes = [], [], []
    for metric, vals in values.items():
        e, caught = stats.factorial_effects(vals, data.varying, alpha=alpha, seed=seed)
        notes += [f"{metric}: {note}" for note in caught]
        effects.append(e.assign(metric=metric))
        design = stats.distinct_factors(vals, data.varying)
        if len(design) > 1:
            inter.append(stats.interactions(vals, design, alpha=alpha).assign(metric=metric))
    effects_df = pd.concat(effects, ignore_index=True) if effects else pd.DataFrame()
    if not effects_df.empty:
        effects_df["p_holm"] = stats.holm(effects_df["test_p"].to_numpy())
    return effects_df, (pd.concat(inter, ignore_index=True) if inter else pd.DataFrame()), notes


def _findings(r: Report) -> list[str]:
    """One sentence per effect: the switch (or arm), the metric, Δ with its CI and p-values; where there is no
    estimate or test, the reason instead of a NaN."""
    a = r.settings.alpha
    out = []
    if not r.effects.empty:
        for e in r.effects[
            r.effects["level"] != r.effects.groupby(["metric", "factor"])["level"].transform("first")
        ].itertuples():
            base = r.effects[(r.effects["metric"] == e.metric) & (r.effects["factor"] == e.factor)].iloc[0]["level"]
            head = f"{e.factor}: {base} → {e.level}"
            if np.isnan(e.test_p):
                why = e.note if isinstance(e.note, str) and e.note else "fewer than 2 finished runs at a level: no test"
                out.append(f"{head} on {e.metric}: {why}.")
                continue
            how = "cell-means t-test (Welch–Satterthwaite df)" if not np.isnan(e.model_p) else "Welch"
            out.append(
                f"{head} changes {e.metric} by {e.effect:+.4g} "
                f"(95% CI {e.test_low:+.4g} to {e.test_high:+.4g}; {how} p = {e.test_p:.3g}, "
                f"Holm-adjusted p = {e.p_holm:.3g}{_verdict(e.p_holm, a)}; {int(e.n)} runs at this level)."
            )
    elif not r.comparisons.empty:
        out += [_comparison_finding(c, r.settings) for c in r.comparisons.itertuples()]
    return out


def _comparison_finding(c, s: dict) -> str:
    head = f"{c.arm} vs {c.baseline} on {c.metric}"
    if np.isnan(c.diff):
        return f"{head}: no comparison: {c.arm} has {_runs(c.n1)} with a value, {c.baseline} has {_runs(c.n2)}."
    parts = []
    if not np.isnan(c.welch_low):
        parts.append(f"95% CI {c.welch_low:+.4g} to {c.welch_high:+.4g}")
    if not np.isnan(c.p):
        parts.append(f"{s.test_name} p = {c.p:.3g}, Holm-adjusted p = {c.p_holm:.3g}{_verdict(c.p_holm, s.alpha)}")
    if c.note:
        parts.append(c.note)
    return f"{head}: {c.diff:+.4g} ({'; '.join(parts)}; {_runs(c.n1)} vs {_runs(c.n2)})."


def _runs(n: int) -> str:
    return f"{int(n)} finished run{'' if n == 1 else 's'}"


def _verdict(p: float, alpha: float) -> str:
    return "" if np.isnan(p) else (", significant" if p < alpha else ", not significant") + f" at α = {alpha}"
