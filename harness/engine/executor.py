"""What every executor takes and returns, and the one loop that runs a job's attempts.

`run_attempts` holds the policy: at most `slots` attempts at once, a time limit per attempt, retries, and
a failed, timed-out or stopped attempt recorded in MLflow as a FAILED run with its reason. An executor
(`harness.engine.local`, `harness.engine.ray_executor`) provides only a `Launcher`: start an attempt in a
fresh worker, wait for attempts to end, kill attempts.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol

from mlflow.entities import RunStatus
from mlflow.tracking import MlflowClient

from harness.config.errors import Terminated
from harness.config.job import Job
from harness.engine.resume import end_failed, quote_value
from harness.runs.layout import (
    ARM_LABEL_TAG,
    FAILURE_REASON_TAG,
    JOB_ID_TAG,
    PARENT_RUN_TAG,
    STATUS_TAG,
    SWEEP_ID_TAG,
    run_name,
    run_tags,
)
from harness.runs.writer import failure_reason, prepare_store

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobOutcome:
    """How one job ended (after its retries)."""

    job_id: str
    status: Literal["FINISHED", "FAILED"]
    run_id: str | None
    """The MLflow run of the last attempt (None if the worker died before creating it)."""
    reason: str | None
    """One line: why it failed (exception, timeout, worker killed, interrupted); None when FINISHED."""
    attempts: int
    seconds: float
    value: Any = None
    """What the worker returned besides the run id (a tune trial: its objective values); None for a sweep's job."""


EventHook = Callable[[str, Job, "JobOutcome | None"], None]
"""Called with ("started" | "finished" | "failed" | "retrying", job, outcome-or-None) for progress views."""


class Executor(Protocol):
    def warm(self) -> None:
        """Start what launching will need in the background (`RetryingExecutor.warm`)."""
        ...

    def run(
        self,
        jobs: Sequence[Job],
        *,
        tracking_uri: str,
        sweep_id: str,
        parent_run_id: str | None,
        on_event: EventHook | None = None,
    ) -> list[JobOutcome]:
        """Run every job (each in its own worker, via `harness.engine.executor.run_job`) and return one outcome per job,
        in the order given. A job that crashes, hangs past the time limit or diverges is FAILED, its MLflow
        run ended FAILED with the reason, and the others go on."""
        ...


@dataclass(frozen=True)
class Task:
    """One job as `run_attempts` runs it."""

    job: Job
    call: Callable[[str], Any]
    """Runs the job in a worker, given the tracking URI: returns its run id, or (run id, value). Picklable."""
    tags: dict[str, str]
    """Tags the worker adds to the job's run; a FAILED run made for an attempt that made none carries them too."""
    key: tuple[str, ...] = ()
    """Names in `tags` that, with the sweep and job ids, tell this job's runs from those of a job of the same config."""
    done: Callable[[JobOutcome], None] | None = field(default=None, compare=False)
    """Called in this process with the job's outcome, once its retries are over."""


class Launcher(Protocol):
    """What an executor provides: start attempts, wait for them, kill them."""

    slots: int
    """Attempts at once."""
    poll_s: float
    """Longest wait before the deadlines are looked at again (and Ctrl-C is noticed)."""

    def launch(self, call: Callable[[], Any], name: str) -> Any:
        """Start `call()` in a fresh worker; return a (hashable) handle."""
        ...

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, Any, str | None]]:
        """(handle, returned value, failure reason or None) of the attempts that ended within `timeout` s."""
        ...

    def kill(self, handles: list[Any]) -> None:
        """Stop these attempts and wait until their workers are gone."""
        ...


class RetryingExecutor:
    """Base of the executors: `run` and `run_tasks` go through `run_attempts`; a subclass sets `timeout_s` and
    `retries` and provides `launcher()` (and `worker_uri` when workers need the URI rewritten)."""

    timeout_s: float | None
    """Wall-clock limit of one attempt (worker start included); None = no limit."""
    retries: int
    """Extra attempts for a FAILED job; each is a new MLflow run, the failed ones stay as history."""

    def run(
        self,
        jobs: Sequence[Job],
        *,
        tracking_uri: str,
        sweep_id: str,
        parent_run_id: str | None,
        on_event: EventHook | None = None,
    ) -> list[JobOutcome]:
        tasks = iter([sweep_task(job, sweep_id, parent_run_id) for job in jobs])
        return self.run_tasks(
            lambda: next(tasks, None), tracking_uri=tracking_uri, sweep_id=sweep_id, on_event=on_event
        )

    def run_tasks(
        self,
        next_task: Callable[[], Task | None],
        *,
        tracking_uri: str,
        sweep_id: str,
        on_event: EventHook | None = None,
    ) -> list[JobOutcome]:
        """Run tasks drawn from `next_task` whenever a slot is free (None: none now) until none is left running;
        their outcomes in the order drawn."""
        uri = self.worker_uri(tracking_uri)
        with self.launcher() as launcher:
            return run_attempts(
                launcher,
                next_task,
                tracking_uri=uri,
                sweep_id=sweep_id,
                timeout_s=self.timeout_s,
                retries=self.retries,
                on_event=on_event,
            )

    def worker_uri(self, tracking_uri: str) -> str:
        """The tracking URI as workers must see it."""
        return tracking_uri

    def warm(self) -> None:
        """Start, in the background, what launching the first worker will need, so that it overlaps the caller's
        own setup (preparing the store, say); nothing by default."""

    def launcher(self) -> AbstractContextManager[Launcher]:
        raise NotImplementedError


def job_tags(job: Job, parent_run_id: str | None) -> dict[str, str]:
    """The tags a sweep adds to a job's run: its arm label (which names the run) and the parent run."""
    tags = {ARM_LABEL_TAG: job.arm}
    if parent_run_id:
        tags[PARENT_RUN_TAG] = parent_run_id
    return tags


def run_job(job: Job, tracking_uri: str, sweep_id: str, parent_run_id: str | None) -> str:
    """Train `job` in this process and return its MLflow run id (raises if the run failed)."""
    from harness.engine.training import (
        run_training,  # heavy imports (torch) only inside workers
    )

    return run_training(
        job.config,
        tracking_uri=tracking_uri,
        sweep_id=sweep_id,
        extra_tags=job_tags(job, parent_run_id),
        progress=False,
    ).run_id


def in_worker(call: Callable[[], Any]) -> Any:
    """An attempt's body in its worker: `call()`, without MLflow's "View run" lines (one pair per job's run when the
    store is a server, printed by every worker into the sweep's output)."""
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    return call()


def sweep_task(job: Job, sweep_id: str, parent_run_id: str | None) -> Task:
    """A sweep's job as a task: `run_job` in the worker."""
    return Task(
        job, partial(run_job, job, sweep_id=sweep_id, parent_run_id=parent_run_id), job_tags(job, parent_run_id)
    )


@dataclass
class _Attempt:
    index: int
    """Position of the task in the order drawn."""
    number: int
    """1 for the first attempt."""
    started: float
    """time.monotonic() at launch."""
    started_ms: int
    """Wall clock at launch, to tell this attempt's MLflow run from earlier ones."""


def run_attempts(
    launcher: Launcher,
    next_task: Callable[[], Task | None],
    *,
    tracking_uri: str,
    sweep_id: str,
    timeout_s: float | None,
    retries: int,
    on_event: EventHook | None = None,
) -> list[JobOutcome]:
    """The one loop of every executor (see the module docstring). A retry goes before any new task. On an
    exception (Ctrl-C, SIGTERM, an executor error) the running attempts are killed, their runs ended FAILED with
    the reason, and it is raised: no run is left RUNNING once this returns or raises."""
    emit = on_event or (lambda *_: None)
    client = MlflowClient(tracking_uri)
    tasks: list[Task] = []
    outcomes: list[JobOutcome | None] = []
    first_start: dict[int, float] = {}
    retry: deque[tuple[int, int]] = deque()
    active: dict[Any, _Attempt] = {}

    def start(index: int, number: int) -> None:
        task = tasks[index]
        started_ms = int(time.time() * 1000)
        handle = launcher.launch(partial(in_worker, partial(task.call, tracking_uri)), f"harness-job-{task.job.job_id}")
        now = time.monotonic()
        first_start.setdefault(index, now)
        active[handle] = _Attempt(index, number, now, started_ms)
        emit("started", task.job, None)

    def fill() -> None:
        while len(active) < launcher.slots:
            if retry:
                start(*retry.popleft())
                continue
            task = next_task()
            if task is None:
                return
            tasks.append(task)
            outcomes.append(None)
            start(len(tasks) - 1, 1)

    def settle(attempt: _Attempt, value: Any, reason: str | None) -> None:
        """Record how an attempt ended (a failure in MLflow too), then retry it or report its outcome."""
        task = tasks[attempt.index]
        run_id, value = value if isinstance(value, tuple) else (value, None)
        if reason is not None:
            run_id = record_failure(client, tracking_uri, task, sweep_id, reason, attempt.started_ms)
        outcome = JobOutcome(
            task.job.job_id,
            "FAILED" if reason else "FINISHED",
            run_id,
            reason,
            attempt.number,
            time.monotonic() - first_start[attempt.index],
            value,
        )
        if reason is not None and attempt.number <= retries:
            emit("retrying", task.job, outcome)
            retry.appendleft((attempt.index, attempt.number + 1))
            return
        outcomes[attempt.index] = outcome
        emit("failed" if reason else "finished", task.job, outcome)
        if task.done is not None:
            task.done(outcome)

    try:
        while True:
            fill()
            if not active:
                break
            wait_s = launcher.poll_s
            if timeout_s is not None:
                next_deadline = min(a.started for a in active.values()) + timeout_s
                wait_s = max(0.0, min(wait_s, next_deadline - time.monotonic()))
            for handle, value, reason in launcher.wait(list(active), wait_s):
                settle(active.pop(handle), value, reason)
            now = time.monotonic()
            expired = [h for h, a in active.items() if timeout_s is not None and now - a.started >= timeout_s]
            if expired:
                launcher.kill(expired)
                for handle in expired:
                    settle(active.pop(handle), None, f"timeout after {timeout_s:g} s")
    except BaseException as exc:
        reason = stop_reason(exc) or f"executor error: {failure_reason(exc)}"
        launcher.kill(list(active))
        for attempt in active.values():
            record_failure(client, tracking_uri, tasks[attempt.index], sweep_id, reason, attempt.started_ms)
        raise
    return outcomes  # type: ignore[return-value]  # every slot is filled once the loop ends


def record_failure(
    client: MlflowClient, tracking_uri: str, task: Task, sweep_id: str, reason: str, since_ms: int
) -> str | None:
    """Make the store say this attempt FAILED with `reason`; return its run id.

    A worker killed mid-run leaves its run RUNNING: found by its tags (sweep, job, `task.key`, started
    since the attempt began) and ended FAILED. A worker that failed before creating a run (bad device,
    missing model) gets a FAILED run made here, so that every attempt shows up in MLflow.
    Best effort: a store that is itself broken must not hide the job's own failure.
    """
    job = task.job
    try:
        experiment_id = prepare_store(tracking_uri, job.config.tracking.experiment)
        query = " AND ".join(
            [
                f"tags.{SWEEP_ID_TAG} = {quote_value(sweep_id)}",
                f"tags.{JOB_ID_TAG} = {quote_value(job.job_id)}",
                *[f"tags.{key} = {quote_value(task.tags[key])}" for key in task.key],
                f"attributes.start_time >= {since_ms}",
            ]
        )
        runs = client.search_runs([experiment_id], query)  # newest first
        for run in runs:
            if run.info.status == "RUNNING":
                end_failed(client, run.info.run_id, reason)
        if runs:
            return runs[0].info.run_id
        tags = {**run_tags(job.config, sweep_id), **task.tags, STATUS_TAG: "FAILED", FAILURE_REASON_TAG: reason}
        run = client.create_run(experiment_id, run_name=run_name(job.config, job.arm), tags=tags)
        client.set_terminated(run.info.run_id, status=RunStatus.to_string(RunStatus.FAILED))
        return run.info.run_id
    except Exception as exc:  # noqa: BLE001
        _log.warning("job %s: could not record its failure in MLflow (%s)", job.job_id, exc)
        return None


def stop_reason(exc: BaseException) -> str | None:
    """The failure reason of runs stopped by the user ("interrupted", "terminated"); None for any other error."""
    if isinstance(exc, Terminated):
        return "terminated"
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else None


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread (once: a second SIGTERM during the
    cleanup is ignored). Outside the main thread nothing changes (Python delivers signals only there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
