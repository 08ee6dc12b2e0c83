"""One sweep's runs and metric histories, shaped for the pages: arms, seeds, curves per arm."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.config.at import At, value_key
from harness.config.run_config import defines_arm
from harness.runs.layout import (
    ARM_LABEL_TAG,
    BASE_MODEL_SHA256_TAG,
    CPU_CAPABILITY_TAG,
    CPU_FAMILY_TAG,
    CPU_MODEL_TAG,
    CPU_PATH_ENV_TAG,
    CPU_VENDOR_TAG,
    GPU_TAG,
    JOB_ID_TAG,
    TORCH_THREADS_TAG,
    TORCH_VERSION_TAG,
)
from harness.runs.reader import Reader, Sweep, planned_jobs
from trainer import metric_names as M

STALE_S = 600  # a RUNNING run with no metric for this long is shown as stalled
HISTORY = ("duplicate", "retried")  # states of runs that do not stand for their job (see _one_run_per_job)


def job_label(arm: str, seed: int) -> str:
    """A job as the report, `harness claims` and the dashboard name it."""
    return f"{arm} · seed {seed}"


@dataclass(frozen=True)
class FailedRun:
    """A run of a job that has not finished, ended FAILED or KILLED, with the reason harness recorded."""

    arm: str
    seed: int
    run_id: str
    reason: str

    def line(self) -> str:
        return f"{job_label(self.arm, self.seed)} (run {self.run_id}): {self.reason or 'no reason recorded'}"

    @property
    def diverged(self) -> bool:
        """Whether the run diverged (the trainer's TrainingDiverged: non-finite loss, gradient or parameters)."""
        return "diverged at step" in self.reason


@dataclass(frozen=True)
class RunMachine:
    """Where a run computed, from its tags (`harness.runs.layout.machine_tags`); a run logged before harness
    recorded them has every field empty: not recorded."""

    cpu_model: str = ""
    cpu_capability: str = ""
    """torch's CPU code path (AVX2, AVX512, ...)."""
    torch_version: str = ""
    threads: int | None = None
    base_model_sha256: str = ""
    """"" where the run could not hash its base model, or did not record it."""
    gpu: str = ""
    """The CUDA device's name ("" on CPU)."""
    cpu_vendor: str = ""
    cpu_family: str = ""
    """The CPU's vendor and family/model numbers ("" in runs logged before harness recorded them)."""
    cpu_path_env: str = ""
    """The pin's variables as the run had them ("" before harness recorded them)."""

    @classmethod
    def of(cls, tags: Mapping[str, object]) -> RunMachine:
        """From a run's tags (a row of `Sweep.runs`; a missing tag reads as empty)."""
        text = {k: v if isinstance(v, str) else "" for k, v in tags.items()}
        threads = text.get(TORCH_THREADS_TAG, "")
        return cls(
            text.get(CPU_MODEL_TAG, ""),
            text.get(CPU_CAPABILITY_TAG, ""),
            text.get(TORCH_VERSION_TAG, ""),
            int(threads) if threads.isdigit() else None,
            text.get(BASE_MODEL_SHA256_TAG, ""),
            text.get(GPU_TAG, ""),
            text.get(CPU_VENDOR_TAG, ""),
            text.get(CPU_FAMILY_TAG, ""),
            text.get(CPU_PATH_ENV_TAG, ""),
        )

    @property
    def recorded(self) -> bool:
        return bool(self.cpu_capability or self.torch_version)

    @property
    def vendor(self) -> str:
        """The CPU's vendor as recorded, else read from the model name of a run that predates the tag ('AMD
        EPYC' → AuthenticAMD, 'Intel(R) Xeon(R)' → GenuineIntel), else ""."""
        if self.cpu_vendor:
            return self.cpu_vendor
        name = self.cpu_model.lower()
        return "AuthenticAMD" if name.startswith("amd") else "GenuineIntel" if name.startswith("intel") else ""

    def bits_differ(self, other: RunMachine) -> str:
        """Why runs here and on `other` need not agree to the bit ('' where the pinned path promises they do):
        another CPU vendor or family (where both recorded one), CPU capability, torch, or base model."""
        parts = []
        if self.vendor and other.vendor and self.vendor != other.vendor:
            parts.append(f"CPU vendor {self.vendor} vs {other.vendor}")
        elif self.cpu_family and other.cpu_family and self.cpu_family != other.cpu_family:
            parts.append(f"CPU family {self.cpu_family} vs {other.cpu_family}")
        for name, a, b in (
            ("CPU capability", self.cpu_capability, other.cpu_capability),
            ("torch", self.torch_version, other.torch_version),
            ("base model", self.base_model_sha256[:12], other.base_model_sha256[:12]),
            ("pin", self.cpu_path_env, other.cpu_path_env),
        ):
            if a and b and a != b:
                parts.append(f"{name} {a} vs {b}")
        return ", ".join(parts)

    def row(self) -> dict[str, str]:
        """The machine as a table row (report, dashboard): CPU, capability, torch, threads, base model (its sha256's
        first 12 characters), and GPU on a CUDA run."""
        if not self.recorded:
            return {"CPU": "not recorded"}
        family = f" ({self.cpu_vendor} {self.cpu_family})" if self.cpu_family else ""
        return {
            "CPU": self.cpu_model + family,
            "capability": self.cpu_capability,
            "torch": self.torch_version,
            "threads": "?" if self.threads is None else str(self.threads),
            "base model": self.base_model_sha256[:12] or "unknown",
            **({"GPU": self.gpu} if self.gpu else {}),
        }

    def text(self) -> str:
        """One line: 'AMD EPYC 7B13, AVX512, torch 2.6.0, 1 thread, base model ab79c4c1d2e3', or 'not recorded'."""
        if not self.recorded:
            return "not recorded"
        r = self.row()
        threads = f"{r['threads']} thread{'' if self.threads == 1 else 's'}"
        gpu = f", GPU {self.gpu}" if self.gpu else ""
        return f"{r['CPU']}, {r['capability']}, torch {r['torch']}, {threads}, base model {r['base model']}{gpu}"


@dataclass(frozen=True)
class MachineRuns:
    """One distinct machine among a sweep's runs, and how many of them computed there."""

    machine: RunMachine
    runs: int


def machine_runs(machines: Iterable[RunMachine]) -> list[MachineRuns]:
    """The distinct machines, most runs first, not recorded last."""
    counts = Counter(machines)
    order = sorted(counts, key=lambda m: (not m.recorded, -counts[m], m.text()))
    return [MachineRuns(m, counts[m]) for m in order]


def mixed_machines(machines: Iterable[RunMachine]) -> str:
    """What a set of runs mixes that can move its numbers: 'runs from 2 CPU vendors (AuthenticAMD, GenuineIntel)',
    'runs from 2 CPU capabilities (AVX2, AVX512)', 'runs from 5 base models', or several; '' when the runs share one
    of each. A run that did not record one is no value."""
    machines = list(machines)
    vendors = sorted({m.vendor for m in machines} - {""})
    capabilities = sorted({m.cpu_capability for m in machines} - {""})
    models = {m.base_model_sha256 for m in machines} - {""}
    parts = [f"{len(vendors)} CPU vendors ({', '.join(vendors)})"] if len(vendors) > 1 else []
    if len(capabilities) > 1:
        parts.append(f"{len(capabilities)} CPU capabilities ({', '.join(capabilities)})")
    if len(models) > 1:
        parts.append(f"{len(models)} base models")
    return "runs from " + " and ".join(parts) if parts else ""


@dataclass(frozen=True)
class Jobs:
    """Where a sweep's jobs stand: every planned job (jobs.json), plus any job of the sweep run outside the
    current plan (an earlier profile, say), each counted once by the best of its runs: a run done, else one still
    running (or stalled), else one stopped early on purpose (an Optuna trial), else only failed runs; a planned job
    with no run never started. The one account of a sweep's
    progress that the report, `harness claims` and the dashboard print."""

    total: int
    """Jobs planned or run."""
    finished: int
    running: int
    pruned: int
    failed: int
    """Jobs whose runs all failed."""
    missing: int
    """Planned jobs with no run at all."""
    failed_runs: tuple[FailedRun, ...] = ()
    """Every failed run of a job that has not finished (a retried job's earlier failures are history, not here)."""
    missing_jobs: tuple[tuple[str, int], ...] = ()
    """(arm, seed) of each planned job with no run."""

    def line(self) -> str:
        """E.g. '0 of 2 jobs finished: 2 failed, 0 running, 0 never started'."""
        parts = [f"{self.failed} failed", f"{self.running} running"]
        if self.pruned:
            parts.append(f"{self.pruned} pruned")
        return f"{self.finished} of {self.total} jobs finished: {', '.join(parts)}, {self.missing} never started"


@dataclass
class SweepData:
    """Everything the pages draw from, loaded in one go."""

    sweep: Sweep
    runs: pd.DataFrame
    """One row per job run: run_id, run_name, arm (label), arm_id, seed, status, state (see `_state`), failure_reason,
    last_step, steps, last_logged (ms), artifact_uri, machine (`RunMachine`), plus one column per varying param."""
    metrics: pd.DataFrame
    """Long frame run_id, key, step, value."""
    varying: list[str]
    """Params that define the arms (differ across runs, seed excluded)."""
    arms: list[str]
    """Arm labels in plan order (the progressive order of a cumulative sweep)."""
    params: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Every param of every run (index run_id, one column per param)."""
    cumulative: bool = False
    planned: list[dict] = field(default_factory=list)
    """The sweep's planned jobs (jobs.json), empty when the sweep predates it."""
    warnings: list[str] = field(default_factory=list)
    """What the reader set aside and why (a job with two FINISHED runs), for the report and the pages."""

    @property
    def keys(self) -> list[str]:
        return sorted(map(str, self.metrics["key"].unique())) if not self.metrics.empty else []

    def wide(self, key: str, x: str = "step") -> pd.DataFrame:
        """One column per run, indexed by step (or by tokens generated when x='tokens')."""
        m = self.metrics[self.metrics["key"] == key]
        if m.empty:
            return pd.DataFrame()
        w = m.pivot_table(index="step", columns="run_id", values="value", aggfunc="last", observed=True)
        if x == "tokens":
            t = self.wide(M.TOKENS_GENERATED)
            if t.empty:
                return pd.DataFrame()
            cols = [c for c in w.columns if c in t.columns]
            return pd.concat({c: w[c].set_axis(t[c].reindex(w.index).to_numpy()).dropna() for c in cols}, axis=1)
        return w

    @property
    def machines(self) -> list[MachineRuns]:
        """The distinct machines the sweep's runs computed on, with how many runs each (`machine_runs`)."""
        return machine_runs(self._machines())

    def mixed(self, run_ids: Iterable[str]) -> str:
        """`mixed_machines` of the runs `run_ids` (a claim's)."""
        return mixed_machines(self._machines()[self.runs["run_id"].isin(set(run_ids))])

    def _machines(self) -> pd.Series:
        """Each run's `RunMachine` (not recorded for a frame built without them)."""
        return self.runs["machine"] if "machine" in self.runs else pd.Series(RunMachine(), index=self.runs.index)

    @property
    def jobs(self) -> Jobs:
        """Where the sweep's jobs stand (`Jobs`)."""
        return job_states(self.runs, self.planned)

    @property
    def current(self) -> pd.DataFrame:
        """The runs that stand for their jobs: `runs` less the history (states in HISTORY)."""
        return self.runs[~self.runs["state"].isin(HISTORY)]

    def by_arm(self, key: str, x: str = "step", only: Iterable[str] | None = None) -> dict[str, pd.DataFrame]:
        """Arm → (steps × seeds) frame, columns named by seed: the `current` runs, or only the run ids `only`; the
        steps are those at which at least one of the arm's runs logged `key`."""
        w = self.wide(key, x)
        out = {}
        pool = self.current if only is None else self.runs[self.runs["run_id"].isin(set(only))]
        for arm in self.arms:
            runs = pool[(pool["arm"] == arm) & pool["run_id"].isin(w.columns)]
            if not runs.empty:
                frame = w[runs["run_id"].tolist()].dropna(how="all")
                out[arm] = frame.set_axis([f"seed {s}" for s in runs["seed"]], axis=1)
        return out

    def values(self, key: str, at: At, *, finished_only: bool = True) -> RunValues:
        """One value of `key` per run, read at `at`: the one rule by which claims, reports and the dashboard's
        tables turn a run's curve into a number. Runs: the finished ones (`finished_only`), else every `current`
        run. A run that never logged `key` (or has no point at `at`) has no value; a run whose value is ±inf is
        set aside and named in `not_finite`, since no statistic can use it."""
        runs = self.runs[self.runs["state"] == "done"] if finished_only else self.current
        cols = ["run_id", "arm", "seed", *self.varying]
        m = self.metrics[(self.metrics["key"] == key) & self.metrics["run_id"].isin(runs["run_id"])]
        if m.empty:  # groupby-apply on nothing gives a frame, not a series
            return RunValues(runs[cols].iloc[:0].assign(value=pd.Series(dtype=float)).reset_index(drop=True), "")
        vals = (
            m.sort_values("step")
            .groupby("run_id", observed=True)[["step", "value"]]
            .apply(lambda curve: at.value(curve["step"].tolist(), curve["value"].tolist()))
            .rename("value")
        )
        out = runs[cols].join(vals, on="run_id").dropna(subset=["value"]).reset_index(drop=True)
        finite = np.isfinite(out["value"].to_numpy(float))
        return RunValues(out[finite].reset_index(drop=True), non_finite(out, key, self.runs))


@dataclass(frozen=True)
class RunValues:
    """`SweepData.values`: the finite values (run_id, arm, seed, the varying settings, value) and, when some run's
    value is ±inf, one line naming each such run ('' when none)."""

    frame: pd.DataFrame
    not_finite: str


def read_sweep(reader: Reader, sweep: Sweep) -> SweepData:
    """Runs, params and every metric point of `sweep` (three queries on a SQL store)."""
    runs = sweep.runs.copy()
    ids = runs["run_id"].tolist()
    params = reader.params(ids)
    wide = (
        params.pivot_table(index="run_id", columns="key", values="value", aggfunc="last")
        if not params.empty
        else pd.DataFrame(index=pd.Index([], name="run_id"))
    )
    varying = [k for k in wide.columns if defines_arm(k) and wide[k].nunique(dropna=False) > 1]
    runs = runs.join(wide[varying], on="run_id") if varying else runs
    metrics = reader.metrics(ids)
    plan = planned_jobs(sweep) or {}
    planned = plan.get("jobs", [])

    runs["arm_id"] = runs["arm"] if "arm" in runs else None  # the `arm` tag: hash of the config without the seed
    label = runs[ARM_LABEL_TAG] if ARM_LABEL_TAG in runs else pd.Series(None, index=runs.index, dtype=object)
    fallback = (
        runs[varying].astype(str).apply(lambda r: " ".join(f"{k.split('.')[-1]}={v}" for k, v in r.items()), axis=1)
        if varying
        else pd.Series("all runs", index=runs.index)
    )
    runs["arm"] = label.where(label.notna() & (label.astype(str) != ""), fallback).fillna("all runs").astype(str)
    runs["seed"] = (
        pd.to_numeric(runs.get("seed", pd.Series(None, index=runs.index, dtype=object)), errors="coerce")
        .fillna(-1)
        .astype(int)
    )
    runs["failure_reason"] = runs.get("failure_reason", pd.Series(None, index=runs.index, dtype=object))
    runs["steps"] = (
        pd.to_numeric(wide["train.steps"].reindex(runs["run_id"]).to_numpy(), errors="coerce")
        if "train.steps" in wide
        else np.nan
    )
    last = metrics.groupby("run_id", observed=True)["step"].max() if not metrics.empty else pd.Series(dtype=float)
    runs["last_step"] = runs["run_id"].map(last).fillna(0).astype(int)
    runs["last_logged"] = runs["run_id"].map(reader.last_logged(ids))
    runs["state"] = [_state(r) for r in runs.itertuples()]
    runs["machine"] = [RunMachine.of(tags) for tags in runs.to_dict("records")]
    warnings = _one_run_per_job(runs)

    order = list(dict.fromkeys(j["arm"] for j in planned))
    arms = [a for a in order if a in set(runs["arm"])] + sorted(set(runs["arm"]) - set(order))
    runs = runs.sort_values(
        ["arm", "seed"], key=lambda c: c.map({a: i for i, a in enumerate(arms)}) if c.name == "arm" else c
    ).reset_index(drop=True)
    return SweepData(sweep, runs, metrics, varying, arms, wide, bool(plan.get("cumulative", False)), planned, warnings)


def _one_run_per_job(runs: pd.DataFrame) -> list[str]:
    """Settle the runs of each job id (in place) so that a job counts once, however often it was run.

    A killed sweep's surviving worker, or two invocations at once, can leave two FINISHED runs of one job;
    a resumed sweep leaves the FAILED attempts of jobs it then finished. Rule: of the job's FINISHED runs, the one
    with its metrics complete to its `train.steps`, the latest started of those (ties: the larger run id), is its
    result; where none is complete, the one with the most steps logged, latest first. Its other FINISHED runs become
    "duplicate" and its FAILED or KILLED runs "retried" (history, not failures). Returns a warning per duplicated
    job id, naming the run counted and the runs left out with the steps each logged.
    """
    if JOB_ID_TAG not in runs:
        return []
    job = runs[JOB_ID_TAG].fillna("").astype(str)
    finished = runs[(runs["status"] == "FINISHED") & (job != "")]
    complete = finished["last_step"] >= finished["steps"].fillna(np.inf)
    ranked = finished.assign(_complete=complete).sort_values(
        ["_complete", "last_step", "start_time", "run_id"], ascending=False
    )
    kept = ranked.drop_duplicates(JOB_ID_TAG)
    extra = ranked.drop(kept.index)
    runs.loc[extra.index, "state"] = "duplicate"
    runs.loc[job.isin(set(kept[JOB_ID_TAG])) & (runs["state"] == "failed"), "state"] = "retried"
    counted = kept.set_index(JOB_ID_TAG)

    def steps(run: pd.Series) -> str:
        return f"{run['run_id']} ({run['last_step']} of {_steps_text(run['steps'])} steps)"

    return [
        f"job {j} has {len(g) + 1} FINISHED runs: counted once, as run {steps(counted.loc[j])} (the latest "
        f"{'complete' if counted.loc[j, '_complete'] else 'with the most steps: none is complete'}); left out: "
        + ", ".join(steps(r) for _, r in g.iterrows())
        for j, g in extra.groupby(JOB_ID_TAG, sort=True)
    ]


def _steps_text(steps: float) -> str:
    return "?" if pd.isna(steps) else str(int(steps))


def job_states(runs: pd.DataFrame, planned: list[dict]) -> Jobs:
    """`Jobs` from a sweep's runs (with `state`, as `read_sweep` sets it) and its planned jobs (jobs.json); a run
    without a job id (a single run) is a job of its own."""
    key = runs[JOB_ID_TAG].fillna(runs["run_id"]) if JOB_ID_TAG in runs else runs["run_id"]
    rank = {"done": 0, "running": 1, "stalled": 1, "pruned": 2, "failed": 3}
    names = ("finished", "running", "pruned", "failed")
    best = runs["state"].map(rank).groupby(key).min().dropna()  # duplicate and retried runs rank nowhere
    state = {job: names[int(r)] for job, r in best.items()}
    never = [j for j in dict.fromkeys(p["job_id"] for p in planned) if j not in set(key)]
    counts = pd.Series(list(state.values()), dtype=object).value_counts()
    stuck = runs[(runs["state"] == "failed") & key.map(state).eq("failed")]
    where = {p["job_id"]: (str(p["arm"]), int(p["seed"])) for p in planned}
    return Jobs(
        total=len(state) + len(never),
        finished=int(counts.get("finished", 0)),
        running=int(counts.get("running", 0)),
        pruned=int(counts.get("pruned", 0)),
        failed=int(counts.get("failed", 0)),
        missing=len(never),
        failed_runs=tuple(
            FailedRun(str(r.arm), int(r.seed), str(r.run_id), _text(r.failure_reason))
            for r in stuck.sort_values("start_time").itertuples()
        ),
        missing_jobs=tuple(where[j] for j in never),
    )


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def non_finite(values: pd.DataFrame, metric: str, runs: pd.DataFrame) -> str:
    """'' when every value of `metric` (a frame run_id, arm, seed, value) is finite, else one line naming
    each run whose value is ±inf: the statistics refuse such values (NaN, no value, is simply left out)."""
    bad = values[np.isinf(values["value"].to_numpy(float))]
    if bad.empty:
        return ""
    names = runs.set_index("run_id")["run_name"] if "run_name" in runs else pd.Series(dtype=str)
    which = "; ".join(
        f"run {r.run_id} ({names.get(r.run_id, '?')}, arm {r.arm}, seed {r.seed}): {r.value}" for r in bad.itertuples()
    )
    return (
        f"metric {metric} is not finite in {which}; the statistics need finite values (leave the metric out, "
        f"or take each run's value at a step before it diverged)"
    )


def arm_setting(data: SweepData, key: str) -> dict[str, str]:
    """Arm → the value of param `key` in its runs (e.g. objective.ratio)."""
    if key not in data.params:
        return {}
    vals = data.runs.join(data.params[key].rename("_v"), on="run_id").dropna(subset=["_v"])
    return vals.groupby("arm")["_v"].first().astype(str).to_dict()  # an arm whose runs logged no params is absent


def updates_per_batch(data: SweepData) -> dict[str, int]:
    """Arm → optimiser steps per rollout batch (`train.mini_batches` × `train.epochs`); 1 is on-policy, where every
    ratio is 1 and nothing can be clipped. Arms that logged neither setting are absent."""
    mb, ep = arm_setting(data, "train.mini_batches"), arm_setting(data, "train.epochs")
    return {arm: int(mb.get(arm, "1")) * int(ep.get(arm, "1")) for arm in {*mb, *ep}}


def _state(run) -> str:
    """done / running / stalled / pruned / failed, from MLflow's status and the last metric's age (and later
    duplicate / retried, by `_one_run_per_job`)."""
    if run.status == "FINISHED":
        return "done"
    if run.status == "KILLED" and getattr(run, "status_tag", None) == "PRUNED":
        return "pruned"  # an Optuna trial stopped early on purpose
    if run.status in ("FAILED", "KILLED"):
        return "failed"
    logged = (
        run.last_logged
        if isinstance(run.last_logged, (int, float)) and not np.isnan(run.last_logged)
        else run.start_time
    )
    if logged and time.time() * 1000 - float(logged) > STALE_S * 1000:
        return "stalled"
    return "running"


@dataclass
class KeptSweepData(SweepData):
    """A `SweepData` read from an evidence file: no metric curves, only each run's kept values."""

    kept: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Index run_id, one column per `value_key`."""

    @property
    def keys(self) -> list[str]:
        return sorted({k.split(" @ ")[0] for k in self.kept.columns})

    def values(self, key: str, at: At, *, finished_only: bool = True) -> RunValues:
        """The kept values of `key` at `at` (an empty frame where the file keeps none there)."""
        runs = self.runs[self.runs["state"] == "done"] if finished_only else self.current
        cols = ["run_id", "arm", "seed", *self.varying]
        name = value_key(key, at)
        column = self.kept[name] if name in self.kept else pd.Series(dtype=float)
        out = runs[cols].join(column.rename("value"), on="run_id").dropna(subset=["value"])
        return RunValues(out.reset_index(drop=True), "")
