"""Run a sweep's jobs on this machine: one fresh process per job, at most `workers` at a time.

A fresh "spawn" process per job (not a fork, not a reused pool worker) means no torch state,
thread setting or leaked memory carries from one run to the next, and a job that segfaults,
hangs or is OOM-killed takes only itself down. The child reports back over a pipe; anything
it cannot report (a kill, a timeout) the parent detects and records in MLflow itself, so that
no run of a sweep is left RUNNING once `run` returns or raises. A child dies with its parent
(`die_with_parent`): a sweep killed outright leaves no worker training on, and its runs RUNNING
for the rerun to end FAILED as orphaned.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from mlflow.entities import RunStatus
from mlflow.tracking import MlflowClient

from harness.engine.executor import EventHook, JobOutcome, run_job, stop_reason
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
from harness.spec.job import Job

_KILL_GRACE_S = 5.0
_POLL_S = 0.5
_log = logging.getLogger(__name__)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Make this (spawned) process die by SIGKILL as soon as `parent_pid`, its parent, is gone, however the
    parent ended. Linux: the kernel's parent-death signal; elsewhere a thread watching the parent pid."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before the signal was armed
                os.kill(os.getpid(), signal.SIGKILL)
            return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_setup(parent_pid: int) -> None:
    """First thing in a worker process: die with the parent; leave Ctrl-C to the parent (it terminates us);
    and give tqdm a thread lock instead of its default named semaphore, which a terminated worker cannot
    unregister (multiprocessing's resource tracker then warns of a "leaked semaphore" at exit)."""
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _child(
    job: Job, tracking_uri: str, sweep_id: str, parent_run_id: str | None, conn: Connection, parent_pid: int
) -> None:
    """Worker entry point: train the job, send ("ok", run id) or ("error", one-line reason)."""
    worker_setup(parent_pid)
    try:
        message = ("ok", run_job(job, tracking_uri, sweep_id, parent_run_id))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as one line
        message = ("error", failure_reason(exc))
    try:
        conn.send(message)
    finally:
        conn.close()


@dataclass
class _Attempt:
    index: int
    number: int
    process: mp.process.BaseProcess
    conn: Connection
    started: float
    started_ms: int


class LocalExecutor:
    """Executor running each job in its own local process (see the module docstring)."""

    def __init__(self, workers: int = 1, timeout_s: float | None = None, retries: int = 0):
        if workers < 1 or retries < 0 or (timeout_s is not None and timeout_s <= 0):
            raise ValueError("workers must be >= 1, retries >= 0 and timeout_s > 0 (or None)")
        self.workers = workers
        """Jobs running at once; each uses `train.threads` torch threads of its own."""
        self.timeout_s = timeout_s
        """Wall-clock limit of one attempt (process start included); None = no limit."""
        self.retries = retries
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
        ctx = mp.get_context("spawn")
        emit = on_event or (lambda *_: None)
        client = MlflowClient(tracking_uri)
        pending = deque((i, 1) for i in range(len(jobs)))
        active: list[_Attempt] = []
        first_start: dict[int, float] = {}
        outcomes: list[JobOutcome | None] = [None] * len(jobs)

        def start(index: int, number: int) -> None:
            reader, writer = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_child,
                args=(jobs[index], tracking_uri, sweep_id, parent_run_id, writer, os.getpid()),
                name=f"harness-job-{jobs[index].job_id}",
                daemon=False,
            )
            started_ms = int(time.time() * 1000)
            process.start()
            writer.close()  # the child holds the only writer: EOF then means it is gone
            first_start.setdefault(index, time.monotonic())
            active.append(_Attempt(index, number, process, reader, time.monotonic(), started_ms))
            emit("started", jobs[index], None)

        def settle(attempt: _Attempt, run_id: str | None, reason: str | None) -> None:
            """Record how an attempt ended, then retry it or report its outcome."""
            job = jobs[attempt.index]
            if reason is not None:
                run_id = record_failure(client, tracking_uri, job, sweep_id, parent_run_id, reason, attempt.started_ms)
            outcome = JobOutcome(
                job.job_id,
                "FAILED" if reason else "FINISHED",
                run_id,
                reason,
                attempt.number,
                time.monotonic() - first_start[attempt.index],
            )
            if reason is not None and attempt.number <= self.retries:
                emit("retrying", job, outcome)
                pending.appendleft((attempt.index, attempt.number + 1))
                return
            outcomes[attempt.index] = outcome
            emit("failed" if reason else "finished", job, outcome)

        try:
            while pending or active:
                while pending and len(active) < self.workers:
                    start(*pending.popleft())
                wait([a.conn for a in active] + [a.process.sentinel for a in active], timeout=_POLL_S)
                for attempt in list(active):
                    ended = self._check(attempt)
                    if ended is not None:
                        active.remove(attempt)
                        attempt.conn.close()
                        settle(attempt, *ended)
        except BaseException as exc:
            reason = stop_reason(exc) or f"executor error: {failure_reason(exc)}"
            for attempt in active:
                attempt.process.terminate()
            for attempt in active:
                _stop(attempt.process)
                record_failure(
                    client, tracking_uri, jobs[attempt.index], sweep_id, parent_run_id, reason, attempt.started_ms
                )
            raise
        return outcomes  # type: ignore[return-value]  # every slot is filled once the loop ends

    def _check(self, attempt: _Attempt) -> tuple[str | None, str | None] | None:
        """(run id, failure reason) once the attempt has ended, None while it runs."""
        alive = attempt.process.is_alive()  # read before polling: a child may report, then exit
        if attempt.conn.poll():
            try:
                kind, value = attempt.conn.recv()
            except (EOFError, OSError):
                pass  # closed without a message: it died, handled below
            else:
                _stop(attempt.process)
                return (value, None) if kind == "ok" else (None, value)
        if not alive:
            attempt.process.join()
            return None, f"worker died (exit code {attempt.process.exitcode})"
        if self.timeout_s is not None and time.monotonic() - attempt.started > self.timeout_s:
            attempt.process.terminate()
            _stop(attempt.process)
            return None, f"timeout after {self.timeout_s:g} s"
        return None


def _stop(process: mp.process.BaseProcess) -> None:
    """Wait for a process to exit; SIGKILL it if it has not after a grace period."""
    process.join(_KILL_GRACE_S)
    if process.is_alive():
        process.kill()
        process.join()


def record_failure(
    client: MlflowClient,
    tracking_uri: str,
    job: Job,
    sweep_id: str,
    parent_run_id: str | None,
    reason: str,
    since_ms: int,
) -> str | None:
    """Make the store say this attempt FAILED with `reason`; return its run id.

    A worker killed mid-run leaves its run RUNNING: found by its tags (sweep, job, started since
    the attempt began) and ended FAILED. A worker that failed before creating a run (bad device,
    missing model) gets a FAILED run made here, so that every attempt shows up in MLflow.
    Best effort: a store that is itself broken must not hide the job's own failure.
    """
    try:
        experiment_id = prepare_store(tracking_uri, job.config.tracking.experiment)
        query = (
            f"tags.{SWEEP_ID_TAG} = {quote_value(sweep_id)} AND tags.{JOB_ID_TAG} = {quote_value(job.job_id)}"
            f" AND attributes.start_time >= {since_ms}"
        )
        runs = client.search_runs([experiment_id], query)  # newest first
        for run in runs:
            if run.info.status == "RUNNING":
                end_failed(client, run.info.run_id, reason)
        if runs:
            return runs[0].info.run_id
        tags = {
            **run_tags(job.config, sweep_id),
            ARM_LABEL_TAG: job.arm,
            STATUS_TAG: "FAILED",
            FAILURE_REASON_TAG: reason,
        }
        if parent_run_id:
            tags[PARENT_RUN_TAG] = parent_run_id
        run = client.create_run(experiment_id, run_name=run_name(job.config, job.arm), tags=tags)
        client.set_terminated(run.info.run_id, status=RunStatus.to_string(RunStatus.FAILED))
        return run.info.run_id
    except Exception as exc:  # noqa: BLE001
        _log.warning("job %s: could not record its failure in MLflow (%s)", job.job_id, exc)
        return None
