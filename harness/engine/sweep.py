"""Run a planned sweep: one parent MLflow run, resume from the store, hand the rest to an executor.

Idempotent by design: rerunning a sweep (after a crash, a Ctrl-C, a SIGKILL) trains only the jobs
that have no FINISHED run yet, reuses the parent run, and first ends FAILED whatever the killed
invocation left RUNNING. One invocation of a sweep at a time: it holds a file lock on (store, sweep id)
while it runs, which the kernel releases however the process ends.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from mlflow.entities import Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_PARAMS_TAGS_PER_BATCH
from rich.console import Console
from rich.live import Live
from rich.text import Text

from harness.config.errors import SweepRunning
from harness.config.job import Job
from harness.config.plan import SweepPlan
from harness.engine.cost import CostModel, Measured, cost_model, makespan, order_jobs, rates_of, work
from harness.engine.executor import Executor, JobOutcome, sigterm_raises, stop_reason
from harness.engine.resume import end_failed, fail_orphans, finished_job_ids, measured_runs, sweep_runs
from harness.runs.layout import (
    JOBS_ARTIFACT,
    N_JOBS_TAG,
    NAME_TAG,
    PARENT_TAG,
    STATUS_TAG,
    SWEEP_ID_TAG,
)
from harness.runs.locks import Busy, hold
from harness.runs.writer import failure_reason, flatten_params, lock_file, prepare_store

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


def run_sweep(
    plan: SweepPlan,
    jobs: Sequence[Job] | None = None,
    *,
    executor: Executor,
    tracking_uri: str,
    console: bool = True,
) -> SweepResult:
    """Run the plan's jobs (or `jobs`, some of them: a round of `--until-decided`) not yet FINISHED, under the
    sweep's one parent run, which records the sweep file as read. They start longest first
    (`harness.engine.cost.order_jobs`: the prior, calibrated by the sweep's runs already in the store); the order
    changes no job, and the job table on the parent run keeps the plan's order.

    The parent run is FAILED if any job failed (or the executor raised, e.g. on Ctrl-C), else FINISHED.
    """
    name, sweep_id, experiment, sweep_file = plan.name, plan.sweep_id, plan.experiment, plan.raw
    jobs = list(plan.jobs if jobs is None else jobs)
    ids = [job.job_id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("two jobs of the sweep have the same config (same job id)")
    elsewhere = {job.config.tracking.experiment for job in jobs} - {experiment}
    if elsewhere:
        raise ValueError(f"jobs log to experiment(s) {sorted(elsewhere)}, not the sweep's {experiment!r}")

    executor.warm()  # its workers' imports overlap the store's preparation
    experiment_id = prepare_store(tracking_uri, experiment)  # once, before any worker touches the store
    with sole_invocation(tracking_uri, sweep_id, f"sweep {name}"), sigterm_raises():
        return _run_locked(name, sweep_id, experiment, experiment_id, sweep_file, jobs, executor, tracking_uri, console)


def sweep_lock(tracking_uri: str, sweep_id: str) -> Path:
    """The lock file of one sweep (or study) on one store."""
    return lock_file(tracking_uri, "sweep-" + hashlib.sha256(sweep_id.encode()).hexdigest()[:16])


@contextmanager
def sole_invocation(tracking_uri: str, sweep_id: str, label: str) -> Iterator[None]:
    """Hold the sweep's lock for the block; `SweepRunning` ("<label> is already running (pid N)") at once
    if another live process holds it."""
    with ExitStack() as stack:
        try:
            stack.enter_context(hold(sweep_lock(tracking_uri, sweep_id), wait=False))
        except Busy as exc:
            raise SweepRunning(f"{label} is already running (pid {exc.pid or '?'})") from None
        yield


def _run_locked(
    name: str,
    sweep_id: str,
    experiment: str,
    experiment_id: str,
    sweep_file: dict[str, Any],
    jobs: Sequence[Job],
    executor: Executor,
    tracking_uri: str,
    console: bool,
) -> SweepResult:
    client = MlflowClient(tracking_uri)
    fail_orphans(tracking_uri, experiment, sweep_id, ORPHAN_REASON)  # safe: no other invocation is alive
    done = finished_job_ids(tracking_uri, experiment, sweep_id)
    result = SweepResult(skipped=[job for job in jobs if job.job_id in done])
    measured = measured_runs(tracking_uri, experiment, sweep_id)
    todo = order_jobs([job for job in jobs if job.job_id not in done], cost_model(jobs, measured))
    result.parent_run_id = parent = parent_run(client, experiment_id, experiment, name, sweep_id, sweep_file)
    _log_plan(client, parent, jobs, cumulative=bool(sweep_file.get("cumulative")))
    out = Console(stderr=True, markup=False, emoji=False)  # a name is text, never Rich markup
    if not todo:
        if console:
            out.print(f"sweep {name}: all {len(jobs)} jobs are done")
        end_parent(client, parent, failed=False)
        return result

    view = _Progress(
        name,
        todo,
        result.skipped,
        getattr(executor, "workers", 1),
        measured,
        log=out if console and not out.is_terminal else None,
    )
    try:
        _build_models(name, todo, out if console else None)
        with (
            Live(view, console=out, refresh_per_second=2, transient=False, redirect_stdout=False, redirect_stderr=True)
            if console and out.is_terminal
            else nullcontext()
        ):
            outcomes = executor.run(
                todo, tracking_uri=tracking_uri, sweep_id=sweep_id, parent_run_id=parent, on_event=view.on_event
            )
    except BaseException as exc:
        end_failed(client, parent, stop_reason(exc) or failure_reason(exc))
        raise
    result.finished = [o for o in outcomes if o.status == "FINISHED"]
    result.failed = [o for o in outcomes if o.status != "FINISHED"]
    end_parent(client, parent, failed=bool(result.failed))
    return result


def _build_models(name: str, jobs: Sequence[Job], out: Console | None) -> None:
    """Build the toy models the jobs need, once, before any job starts: a phase of its own, so that no job's
    time (nor the ETA drawn from it) includes a build, and parallel workers do not wait on one. A toy built for
    the jobs' own task (`model.toy.text`) is keyed by that task's settings too."""
    toys = {
        (toy.model_dump_json(), job.config.task.model_dump_json(), job.config.model.cache_dir): job.config
        for job in jobs
        if job.config.model.source == "toy"
        for toy in [job.config.model.toy.for_run(job.config.seed)]
    }
    if not toys:
        return
    from harness.engine.base_model import task_source
    from harness.engine.training import build_task
    from trainer.models.toy import ensure_toy_model, toy_model_ready

    for config in toys.values():
        toy, cache_dir = config.model.toy.for_run(config.seed), config.model.cache_dir
        task = build_task(config) if toy.text is not None else None
        try:
            source = task_source(config, task)
            if toy_model_ready(toy, cache_dir, source):
                continue
            start = time.monotonic()
            if out is not None:
                out.print(f"sweep {name}: building the toy model in {cache_dir}", soft_wrap=True)
            ensure_toy_model(toy, cache_dir, source)
            if out is not None:
                out.print(f"sweep {name}: toy model built in {_hms(time.monotonic() - start)}", soft_wrap=True)
        finally:
            if task is not None:
                task.close()


def parent_run(
    client: MlflowClient,
    experiment_id: str,
    experiment: str,
    name: str,
    sweep_id: str,
    sweep_file: dict[str, Any],
    *,
    tags: dict[str, str] | None = None,
    artifact: str = "sweep.yaml",
    text: str | None = None,
) -> str:
    """The sweep's (or study's) parent run, set RUNNING: the existing one on a rerun, else a new one with
    the sweep file as params and `text` (default: the file as YAML) as `artifact`."""
    existing = sweep_runs(client, experiment, sweep_id, f"tags.{PARENT_TAG} = '1'")
    if existing:
        run_id = existing[-1].info.run_id  # the oldest, should a race ever have made two
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, STATUS_TAG, "RUNNING")
        return run_id
    run = client.create_run(
        experiment_id,
        run_name=name,
        tags={SWEEP_ID_TAG: sweep_id, PARENT_TAG: "1", NAME_TAG: name, STATUS_TAG: "RUNNING", **(tags or {})},
    )
    run_id = run.info.run_id
    params = [Param(k, v) for k, v in flatten_params(sweep_file).items()]
    for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=params[start : start + MAX_PARAMS_TAGS_PER_BATCH])
    client.log_text(run_id, text if text is not None else yaml.safe_dump(sweep_file, sort_keys=False), artifact)
    return run_id


def _log_plan(client: MlflowClient, run_id: str, jobs: Sequence[Job], *, cumulative: bool) -> None:
    """The planned jobs on the parent run, in plan order (= arm order of a cumulative sweep);
    rewritten by every invocation, since a rerun may plan a different profile."""
    planned = [
        {
            "job_id": j.job_id,
            "arm_id": j.arm_id,
            "arm": j.arm,
            "seed": j.seed,
            "varying": {
                k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for k, v in j.varying.items()
            },
        }
        for j in jobs
    ]
    client.set_tag(run_id, N_JOBS_TAG, str(len(jobs)))
    client.log_dict(run_id, {"cumulative": cumulative, "jobs": planned}, JOBS_ARTIFACT)


def end_parent(client: MlflowClient, run_id: str, *, failed: bool, reason: str = "some jobs failed") -> None:
    if failed:
        end_failed(client, run_id, reason)
        return
    client.log_batch(run_id, tags=[RunTag(STATUS_TAG, "FINISHED")])
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED))


class _Progress:
    """One status line: done / running / failed / skipped, and an ETA.

    The ETA is `harness.engine.cost.makespan` of the jobs left, in the order they will start, on `workers`: each
    queued job at its expected seconds, each running one at its expected seconds less the time it has run (at least
    0). Expected seconds come from `harness.engine.cost.cost_model`, calibrated by the sweep's runs measured in the
    store before it started and by each job that finishes here (the time its successful attempt ran: no queueing,
    failed attempts or builds). Until one run of the sweep is measured, the line says `ETA -`: the prior has no
    unit; while some arms left are not measured yet, it says how many are (they are taken at the measured ones'
    mean rate, see `harness.engine.cost`).

    Redrawn in place on a terminal (rich Live); into a log (`log`, a console that is not a terminal) it
    is printed as a whole line whenever a job ends, so that no other output runs into it. While jobs are
    queued, that line waits for the next job to take the freed slot, so that it counts the jobs that run
    rather than the instant between two of them."""

    def __init__(
        self,
        name: str,
        todo: Sequence[Job],
        skipped: Sequence[Job],
        workers: int,
        measured: Sequence[Measured] = (),
        *,
        log: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.name, self.total, self.skipped, self.workers = name, len(todo), len(skipped), max(1, workers)
        self.log, self.clock = log, clock
        self.running = self.done = self.failed = self.retries = 0
        self.measured: list[Measured] = list(measured)
        """The sweep's runs measured in the store, then each job finished here."""
        jobs = [*todo, *skipped]
        # each job's arm and work once: the ETA is redrawn twice a second, and a config's hash is not free
        self._arm_of = {job.job_id: job.arm_id for job in jobs}
        self._work_of = {job_id: work(job.config) for job_id, job in zip(self._arm_of, jobs)}
        self._arm_work = {self._arm_of[job_id]: w for job_id, w in self._work_of.items()}
        self.model: CostModel = rates_of(self._arm_work, self.measured)
        self._pending: dict[str, Job] = {job_id: job for job_id, job in zip(self._arm_of, todo)}
        """Jobs not started, in the order they will start."""
        self._started: dict[str, tuple[Job, float]] = {}
        self._line_due = False
        self.start = clock()

    def on_event(self, kind: str, job: Job, outcome: JobOutcome | None) -> None:
        now = self.clock()
        if kind == "started":
            self.running += 1
            if job.job_id not in self._arm_of:  # not one of the jobs it was given: counted all the same
                self._arm_of[job.job_id], self._work_of[job.job_id] = job.arm_id, work(job.config)
            self._pending.pop(job.job_id, None)
            self._started[job.job_id] = (job, now)
            if self._line_due:
                self._print_line()
            return
        self.running -= 1
        _, started = self._started.pop(job.job_id, (job, now))
        if kind == "retrying":
            self.retries += 1
            self._pending = {job.job_id: job, **self._pending}  # a retry starts before any queued job
        else:
            self.done += kind == "finished"
            self.failed += kind == "failed"
            if kind == "finished":
                self.measured.append(Measured(self._arm_of.get(job.job_id) or job.arm_id, now - started))
                self.model = rates_of(self._arm_work, self.measured)
        queued = self.total - self.done - self.failed - self.running
        if queued > 0:
            self._line_due = True  # the next start prints it
        else:
            self._print_line()

    def _print_line(self) -> None:
        self._line_due = False
        if self.log is not None:
            self.log.print(self.__rich__(), soft_wrap=True)  # one line, however long

    def eta_s(self) -> float | None:
        """Seconds left (see the class docstring); None before any run is measured or when no job is left."""
        if not self.model.rates or self.done + self.failed >= self.total:
            return None
        now = self.clock()
        running = [max(0.0, self._seconds(job_id) - (now - started)) for job_id, (_, started) in self._started.items()]
        return makespan([self._seconds(job_id) for job_id in self._pending], self.workers, running)

    def _seconds(self, job_id: str) -> float:
        rate = self.model.rate(self._arm_of[job_id])
        assert rate is not None, "a model with a rate has seconds for every job"
        return rate * self._work_of[job_id]

    def arms_left(self) -> tuple[int, int]:
        """(measured, all) arms among the jobs queued or running."""
        arms = {self._arm_of[job_id] for job_id in [*self._pending, *self._started]}
        return len(arms & self.model.rates.keys()), len(arms)

    def __rich__(self) -> Text:
        left = self.total - self.done - self.failed
        eta = self.eta_s()
        if eta is None:
            eta_text = "ETA -" if left else "done"
        else:
            measured, arms = self.arms_left()
            eta_text = f"ETA {_hms(eta)}" + (f" ({measured} of {arms} arms measured)" if measured < arms else "")
        return Text(
            f"sweep {self.name}: {self.done}/{self.total} done, {self.running} running, "
            f"{self.failed} failed, {self.skipped} skipped"
            + (f", {self.retries} retried" if self.retries else "")
            + f" | {_hms(self.clock() - self.start)} elapsed, {eta_text}"
        )


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
