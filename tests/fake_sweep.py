"""Sweeps written straight to MLflow through its client, tagged as `harness sweep` tags them (no training):
for report and dashboard tests of what the reader makes of duplicates, retries, failures and partial sweeps."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from harness.config.plan import SweepFile, SweepPlan

T0 = 1_700_000_000_000  # ms; a run's `start` is minutes after it


@dataclass
class FakeRun:
    arm: str
    seed: int
    status: str = "FINISHED"
    start: float = 0.0
    """Minutes after T0; the run ends 30 minutes later."""
    values: dict[str, list[float]] = field(default_factory=dict)
    """metric → its value at steps 1, 2, …"""
    params: dict[str, str] = field(default_factory=dict)
    job_id: str | None = None
    """Default `<arm>-<seed>`: a rerun of the same job has the same id."""
    reason: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    """More tags (where the run computed, say)."""

    @property
    def job(self) -> str:
        return self.job_id or f"{self.arm}-{self.seed}"


def write_sweep(
    uri: str,
    runs: list[FakeRun],
    *,
    name: str = "fake",
    sweep_id: str = "f1",
    experiment: str = "fake",
    planned: list[tuple[str, int]] | None = None,
    parent_start: float = 0.0,
    spec: dict | None = None,
) -> dict[str, str]:
    """The sweep's parent run (with jobs.json and n_jobs, as `harness sweep` logs them, and `spec` as its
    sweep.yaml) and its job runs; returns {job run's index in `runs` as str: run id}. `planned` defaults to
    the runs' (arm, seed) pairs."""
    client = MlflowClient(uri)
    exp = client.create_experiment(experiment)
    parent = client.create_run(
        exp,
        run_name=name,
        start_time=int(T0 + parent_start * 60_000),
        tags={"sweep_id": sweep_id, "sweep_parent": "1", "name": name},
    )
    ids = {}
    for i, r in enumerate(runs):
        start = int(T0 + r.start * 60_000)
        run = client.create_run(
            exp,
            run_name=f"{name}-{r.arm}-s{r.seed}",
            start_time=start,
            tags={
                "sweep_id": sweep_id,
                "arm": r.arm,
                "arm_label": r.arm,
                "seed": str(r.seed),
                "job_id": r.job,
                "config_hash": r.job,
                "git_commit": "abc1234",
                "mlflow.parentRunId": parent.info.run_id,
                **({"failure_reason": r.reason} if r.reason else {}),
                **r.tags,
            },
        )
        client.log_batch(
            run.info.run_id,
            params=[Param("seed", str(r.seed))] + [Param(k, v) for k, v in r.params.items()],
            metrics=[
                Metric(k, v, start + step * 1000, step)
                for k, vs in r.values.items()
                for step, v in enumerate(vs, start=1)
            ],
        )
        if r.status != "RUNNING":
            client.set_terminated(run.info.run_id, status=r.status, end_time=start + 30 * 60_000)
        ids[str(i)] = run.info.run_id
    jobs = list(dict.fromkeys(planned or [(r.arm, r.seed) for r in runs]))
    client.log_dict(
        parent.info.run_id,
        {
            "cumulative": False,
            "jobs": [{"job_id": f"{a}-{s}", "arm_id": a, "arm": a, "seed": s, "varying": {}} for a, s in jobs],
        },
        "jobs.json",
    )
    client.set_tag(parent.info.run_id, "n_jobs", str(len(jobs)))
    if spec is not None:
        client.log_text(parent.info.run_id, yaml.safe_dump(spec, sort_keys=False), "sweep.yaml")
    client.set_terminated(parent.info.run_id, end_time=int(T0 + 24 * 3600_000))
    return ids


def plan_of(name: str, sweep_id: str, experiment: str, raw: dict, jobs) -> SweepPlan:
    """The plan `plan_sweep` would make, for jobs a test builds in code (`raw`: the sweep file it stands for)."""
    return SweepPlan(name, experiment, sweep_id, "<test>", raw, SweepFile.model_construct(), tuple(jobs))
