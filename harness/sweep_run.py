"""Run a planned sweep: one parent MLflow run, resume from the store, hand the rest to an executor.

Idempotent by design: rerunning a sweep (after a crash, a Ctrl-C, a SIGKILL) trains only the jobs
that have no FINISHED run yet, reuses the parent run, and first ends FAILED whatever the killed
invocation left RUNNING.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Sequence

import yaml
from mlflow.entities import Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_PARAMS_TAGS_PER_BATCH
from rich.console import Console
from rich.live import Live
from rich.text import Text

from harness.executor.base import Executor, JobOutcome
from harness.jobs import Job
from harness.resume import end_failed, fail_orphans, finished_job_ids, sweep_runs
from harness.tracking import STATUS_TAG, failure_reason, flatten_params, prepare_store

PARENT_TAG = "sweep_parent"
N_JOBS_TAG = "n_jobs"
JOBS_ARTIFACT = "jobs.json"  # the planned jobs, read by the dashboard to show progress before a job starts
ORPHAN_REASON = "orphaned: the sweep process died while this run was running"


@dataclass
class SweepResult:
    """What one invocation of a sweep did."""

    skipped: list[Job] = field(default_factory=list)
    """Jobs not run because they already had a FINISHED run."""
    finished: list[JobOutcome] = field(default_factory=list)
    failed: list[JobOutcome] = field(default_factory=list)
    parent_run_id: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed


def run_sweep(name: str, sweep_id: str, experiment: str, spec: dict[str, Any], jobs: Sequence[Job], *,
              executor: Executor, tracking_uri: str, console: bool = True) -> SweepResult:
    """Run the jobs of sweep `sweep_id` not yet FINISHED in `experiment`, under one parent run.

    The parent run is FAILED if any job failed (or the executor raised, e.g. on Ctrl-C), else FINISHED.
    """
    ids = [job.job_id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("two jobs of the sweep have the same config (same job id)")
    elsewhere = {job.config.tracking.experiment for job in jobs} - {experiment}
    if elsewhere:
        raise ValueError(f"jobs log to experiment(s) {sorted(elsewhere)}, not the sweep's {experiment!r}")

    experiment_id = prepare_store(tracking_uri, experiment)  # once, before any worker touches the store
    client = MlflowClient(tracking_uri)
    fail_orphans(tracking_uri, experiment, sweep_id, ORPHAN_REASON)
    done = finished_job_ids(tracking_uri, experiment, sweep_id)
    result = SweepResult(skipped=[job for job in jobs if job.job_id in done])
    todo = [job for job in jobs if job.job_id not in done]
    result.parent_run_id = parent = parent_run(client, experiment_id, experiment, name, sweep_id, spec)
    _log_plan(client, parent, jobs, cumulative=bool(spec.get("cumulative")))
    out = Console(stderr=True)
    if not todo:
        if console:
            out.print(f"sweep {name}: all {len(jobs)} jobs are done")
        end_parent(client, parent, failed=False)
        return result

    view = _Progress(name, len(todo), len(result.skipped), getattr(executor, "workers", 1))
    try:
        with Live(view, console=out, refresh_per_second=2, transient=False, redirect_stdout=False,
                  redirect_stderr=False) if console else nullcontext():
            outcomes = executor.run(todo, tracking_uri=tracking_uri, sweep_id=sweep_id, parent_run_id=parent,
                                    on_event=view.on_event)
    except BaseException as exc:
        end_failed(client, parent, "interrupted" if isinstance(exc, KeyboardInterrupt) else failure_reason(exc))
        raise
    result.finished = [o for o in outcomes if o.status == "FINISHED"]
    result.failed = [o for o in outcomes if o.status != "FINISHED"]
    end_parent(client, parent, failed=bool(result.failed))
    return result


def parent_run(client: MlflowClient, experiment_id: str, experiment: str, name: str, sweep_id: str,
               spec: dict[str, Any], *, tags: dict[str, str] | None = None, artifact: str = "sweep.yaml",
               text: str | None = None) -> str:
    """The sweep's (or study's) parent run, set RUNNING: the existing one on a rerun, else a new one with
    the spec as params and `text` (default: the spec as YAML) as `artifact`."""
    existing = sweep_runs(client, experiment, sweep_id, f"tags.{PARENT_TAG} = '1'")
    if existing:
        run_id = existing[-1].info.run_id  # the oldest, should a race ever have made two
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, STATUS_TAG, "RUNNING")
        return run_id
    run = client.create_run(experiment_id, run_name=name,
                            tags={"sweep_id": sweep_id, PARENT_TAG: "1", "name": name, STATUS_TAG: "RUNNING",
                                  **(tags or {})})
    run_id = run.info.run_id
    params = [Param(k, v) for k, v in flatten_params(spec).items()]
    for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=params[start:start + MAX_PARAMS_TAGS_PER_BATCH])
    client.log_text(run_id, text if text is not None else yaml.safe_dump(spec, sort_keys=False), artifact)
    return run_id


def _log_plan(client: MlflowClient, run_id: str, jobs: Sequence[Job], *, cumulative: bool) -> None:
    """The planned jobs on the parent run, in plan order (= arm order of a cumulative sweep);
    rewritten by every invocation, since a rerun may plan a different profile."""
    planned = [{"job_id": j.job_id, "arm_id": j.arm_id, "arm": j.arm, "seed": j.seed,
                "varying": {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
                            for k, v in j.varying.items()}} for j in jobs]
    client.set_tag(run_id, N_JOBS_TAG, str(len(jobs)))
    client.log_dict(run_id, {"cumulative": cumulative, "jobs": planned}, JOBS_ARTIFACT)


def end_parent(client: MlflowClient, run_id: str, *, failed: bool, reason: str = "some jobs failed") -> None:
    if failed:
        end_failed(client, run_id, reason)
        return
    client.log_batch(run_id, tags=[RunTag(STATUS_TAG, "FINISHED")])
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED))


class _Progress:
    """One live line: done / running / failed / skipped, and an ETA from the mean job time."""

    def __init__(self, name: str, total: int, skipped: int, workers: int):
        self.name, self.total, self.skipped, self.workers = name, total, skipped, max(1, workers)
        self.running = self.done = self.failed = self.retries = 0
        self.seconds: list[float] = []
        self.start = time.monotonic()

    def on_event(self, kind: str, job: Job, outcome: JobOutcome | None) -> None:
        if kind == "started":
            self.running += 1
        elif kind == "retrying":
            self.running -= 1
            self.retries += 1
        else:
            self.running -= 1
            self.done += kind == "finished"
            self.failed += kind == "failed"
            if outcome is not None:
                self.seconds.append(outcome.seconds)

    def __rich__(self) -> Text:
        left = self.total - self.done - self.failed
        if self.seconds and left:
            eta = f"ETA {_hms(sum(self.seconds) / len(self.seconds) * left / min(self.workers, left))}"
        else:
            eta = "ETA -" if left else "done"
        return Text(f"sweep {self.name}: {self.done}/{self.total} done, {self.running} running, "
                    f"{self.failed} failed, {self.skipped} skipped"
                    + (f", {self.retries} retried" if self.retries else "")
                    + f" | {_hms(time.monotonic() - self.start)} elapsed, {eta}")


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
