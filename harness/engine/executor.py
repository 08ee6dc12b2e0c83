"""What every executor takes and returns."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

from harness.runs.layout import ARM_LABEL_TAG, PARENT_RUN_TAG
from harness.spec.job import Job


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


EventHook = Callable[[str, Job, "JobOutcome | None"], None]
"""Called with ("started" | "finished" | "failed" | "retrying", job, outcome-or-None) for progress views."""


class Executor(Protocol):
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


class Terminated(KeyboardInterrupt):
    """SIGTERM (a process manager, `kill PID`), raised in the main thread so that a sweep stops as on Ctrl-C:
    its workers stopped, their runs ended FAILED, a non-zero exit."""


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


def run_job(job: Job, tracking_uri: str, sweep_id: str, parent_run_id: str | None) -> str:
    """Train `job` in this process and return its MLflow run id (raises if the run failed)."""
    from harness.engine.training import (
        run_training,  # heavy imports (torch) only inside workers
    )

    tags = {ARM_LABEL_TAG: job.arm}
    if parent_run_id:
        tags[PARENT_RUN_TAG] = parent_run_id
    return run_training(
        job.config, tracking_uri=tracking_uri, sweep_id=sweep_id, extra_tags=tags, progress=False
    ).run_id
