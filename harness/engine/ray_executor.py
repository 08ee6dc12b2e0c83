"""Run a sweep's jobs as Ray tasks: on a local Ray instance or on an existing cluster.

Each job is one Ray task (a fresh worker process per job) that calls `harness.engine.executor.run_job`, so
the MLflow run is created and ended by the worker exactly as in `harness run`. This module only
adds what a worker cannot do for itself: a time limit, noticing a dead worker, retries, and
recording the failure in MLflow when the worker could not (a killed worker's run still RUNNING
is ended FAILED; an attempt that died before creating a run gets a FAILED run), the same way as
`LocalExecutor`, so that no run of a sweep is left RUNNING once `run` returns or raises.

Tracking URI: every worker writes to the store itself. A `sqlite:///<absolute path>` works for a
local instance (all workers share this machine's file system). A cluster of several machines
needs a store every node can reach: an MLflow tracking server (`--tracking-uri http://host:5000`).
The nodes of such a cluster also need harness installed (same version as the driver).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from harness.engine.executor import EventHook, JobOutcome, run_job, stop_reason
from harness.engine.local import record_failure
from harness.runs.writer import failure_reason
from harness.spec.job import Job

RAY_MISSING = "--executor ray needs the ray extra: pip install 'harness[ray]'"
WORKER_DIED = "worker died"
_SQLITE_PREFIX = "sqlite:///"
_POLL_S = 1.0
"""How often the driver wakes to check deadlines when nothing finishes."""
_CANCEL_GRACE_S = 10.0
"""How long to wait for force-cancelled workers to exit before ending their runs FAILED."""
_log = logging.getLogger(__name__)


def _worker_entry(job: Job, tracking_uri: str, sweep_id: str, parent_run_id: str | None) -> str:
    """Body of the Ray task (module level, so workers import it by name rather than by pickle)."""
    return run_job(job, tracking_uri, sweep_id, parent_run_id)


@dataclass
class _Attempt:
    """One submitted attempt of a job."""

    index: int
    """Position of the job in the list given to `run`."""
    number: int
    """1 for the first attempt."""
    ref: Any
    """The Ray ObjectRef of the task."""
    started: float
    """time.monotonic() at submission."""
    started_ms: int
    """Wall clock at submission, to tell this attempt's MLflow run from earlier ones."""


class RayExecutor:
    """Executor that runs each job as one Ray task.

    `address=None` starts a local Ray instance (loopback only, no dashboard, one CPU slot per core)
    and shuts it down at the end; an address ("auto", "ray://host:10001") connects to an existing
    cluster and leaves it running. If this process is already connected to Ray, that connection
    is used as it is. At most as many jobs are in flight as the cluster has slots for
    (`cpus_per_job`, `gpus_per_job`), so that a job's time limit counts from about when it starts.
    """

    def __init__(
        self,
        address: str | None = None,
        cpus_per_job: float = 1.0,
        gpus_per_job: float = 0.0,
        timeout_s: float | None = None,
        retries: int = 0,
    ):
        if cpus_per_job <= 0 and gpus_per_job <= 0:
            raise ValueError("a job needs cpus_per_job > 0 or gpus_per_job > 0")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        _import_ray()  # fail before the sweep starts, not after its parent run is created
        self.address = address
        """Ray cluster address ("auto", "ray://host:port"); None starts a local instance."""
        self.cpus_per_job = cpus_per_job
        """CPUs Ray reserves for each job's task."""
        self.gpus_per_job = gpus_per_job
        """GPUs Ray reserves for each job's task (fractions share a GPU)."""
        self.timeout_s = timeout_s
        """Wall-clock limit of one attempt; None for no limit."""
        self.retries = retries
        """Extra attempts after a failure; each attempt is a new MLflow run (failed ones stay FAILED)."""

    # -- public --------------------------------------------------------------------------------
    def run(
        self,
        jobs: Sequence[Job],
        *,
        tracking_uri: str,
        sweep_id: str,
        parent_run_id: str | None,
        on_event: EventHook | None = None,
    ) -> list[JobOutcome]:
        ray = _import_ray()
        tracking_uri = self._usable_uri(tracking_uri)
        started_here = self._connect(ray)
        try:
            return self._run_all(ray, list(jobs), tracking_uri, sweep_id, parent_run_id, on_event)
        finally:
            if started_here:
                ray.shutdown()

    # -- connection ----------------------------------------------------------------------------
    def _connect(self, ray) -> bool:
        """Connect to Ray; True if this call started a local instance (to shut down at the end)."""
        return connect(ray, self.address)

    def _usable_uri(self, uri: str) -> str:
        """Make a SQLite path absolute (workers do not share the driver's cwd); warn when a cluster
        is given a store that only this machine can see."""
        if uri.startswith(_SQLITE_PREFIX):
            path = uri[len(_SQLITE_PREFIX) :]
            if path and path != ":memory:" and not Path(path.split("?", 1)[0]).is_absolute():
                uri = _SQLITE_PREFIX + str(Path(path).resolve())
        if self.address and "://" in uri and not uri.startswith(("http://", "https://", "databricks")):
            _log.warning(
                "tracking URI %s is local to this machine: workers on other nodes of the cluster "
                "cannot write to it; use an MLflow tracking server (http://...)",
                uri,
            )
        return uri

    # -- scheduling ----------------------------------------------------------------------------
    def _slots(self, ray) -> int:
        """How many jobs the cluster can run at once, from its total resources."""
        total = ray.cluster_resources()
        slots = []
        if self.cpus_per_job > 0:
            slots.append(int(total.get("CPU", 0) // self.cpus_per_job))
        if self.gpus_per_job > 0:
            slots.append(int(total.get("GPU", 0) // self.gpus_per_job))
        if min(slots) < 1:
            raise RuntimeError(
                f"the Ray cluster ({total.get('CPU', 0):g} CPU, {total.get('GPU', 0):g} GPU) "
                f"cannot fit one job ({self.cpus_per_job:g} CPU, {self.gpus_per_job:g} GPU)"
            )
        return min(slots)

    def _run_all(
        self, ray, jobs: list[Job], uri: str, sweep_id: str, parent_run_id: str | None, on_event: EventHook | None
    ) -> list[JobOutcome]:
        task = ray.remote(num_cpus=self.cpus_per_job, num_gpus=self.gpus_per_job, max_retries=0, max_calls=1)(
            _worker_entry
        )  # max_calls=1: a fresh process (and GPU memory) per job
        emit = on_event or (lambda *_: None)
        client = MlflowClient(uri)
        slots = self._slots(ray)
        outcomes: list[JobOutcome | None] = [None] * len(jobs)
        first_start: dict[int, float] = {}
        queue: list[tuple[int, int]] = [(i, 1) for i in range(len(jobs))]  # (job index, attempt number)
        queue.reverse()  # pop() from the end keeps the given order
        running: dict[Any, _Attempt] = {}

        def submit(index: int, number: int) -> None:
            ref = task.remote(jobs[index], uri, sweep_id, parent_run_id)
            running[ref] = _Attempt(index, number, ref, time.monotonic(), int(time.time() * 1000))
            first_start.setdefault(index, time.monotonic())
            emit("started", jobs[index], None)

        def settle(attempt: _Attempt, status: str, run_id: str | None, reason: str | None) -> None:
            """Record how an attempt ended (a failure in MLflow too), then retry it or report it."""
            job = jobs[attempt.index]
            if status == "FAILED":
                run_id = record_failure(client, uri, job, sweep_id, parent_run_id, reason, attempt.started_ms)
            outcome = JobOutcome(
                job.job_id, status, run_id, reason, attempt.number, time.monotonic() - first_start[attempt.index]
            )
            if status == "FAILED" and attempt.number <= self.retries:
                emit("retrying", job, outcome)
                queue.append((attempt.index, attempt.number + 1))
                return
            outcomes[attempt.index] = outcome
            emit("finished" if status == "FINISHED" else "failed", job, outcome)

        try:
            while queue or running:
                while queue and len(running) < slots:
                    submit(*queue.pop())
                ready, _ = ray.wait(list(running), num_returns=1, timeout=self._wait_s(running))
                for ref in ready:
                    attempt = running.pop(ref)
                    settle(attempt, *self._collect(ray, ref))
                now = time.monotonic()
                expired = [
                    a for a in running.values() if self.timeout_s is not None and now - a.started >= self.timeout_s
                ]
                if expired:
                    self._cancel(ray, [a.ref for a in expired])
                    for attempt in expired:
                        del running[attempt.ref]
                        settle(attempt, "FAILED", None, f"timeout after {self.timeout_s:g} s")
        except BaseException as exc:  # Ctrl-C, or the cluster went away: no run may stay RUNNING
            reason = stop_reason(exc) or f"executor error: {failure_reason(exc)}"
            self._cancel(ray, list(running))
            for attempt in running.values():
                record_failure(client, uri, jobs[attempt.index], sweep_id, parent_run_id, reason, attempt.started_ms)
            raise
        return [o for o in outcomes if o is not None]

    def _wait_s(self, running: dict[Any, _Attempt]) -> float:
        """Sleep until the next deadline, waking at least every `_POLL_S` (so Ctrl-C is prompt)."""
        if self.timeout_s is None or not running:
            return _POLL_S
        next_deadline = min(a.started for a in running.values()) + self.timeout_s
        return max(0.0, min(_POLL_S, next_deadline - time.monotonic()))

    @staticmethod
    def _collect(ray, ref) -> tuple[str, str | None, str | None]:
        """(status, run id, reason) of a task that has ended."""
        try:
            return "FINISHED", ray.get(ref), None
        except ray.exceptions.RayTaskError as exc:  # the job raised: report the job's own exception
            return "FAILED", None, _task_error_reason(ray, exc)
        except ray.exceptions.OutOfMemoryError:  # Ray's memory monitor killed the worker
            return "FAILED", None, f"{WORKER_DIED} (out of memory)"
        except (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.TaskCancelledError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.LocalRayletDiedError,
        ):
            return "FAILED", None, WORKER_DIED
        except ray.exceptions.RayError as exc:  # anything else Ray could not deliver
            return "FAILED", None, f"{WORKER_DIED} ({failure_reason(exc)})"

    @staticmethod
    def _cancel(ray, refs: list) -> None:
        """Kill the workers of `refs` and wait (briefly) until they are gone, so that none of them
        writes to its MLflow run after we end it."""
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception as exc:  # noqa: BLE001 - already finished, or the cluster is gone
                _log.warning("could not cancel a Ray task: %s", exc)
        try:
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_GRACE_S)
        except Exception as exc:  # noqa: BLE001
            _log.warning("could not wait for cancelled Ray tasks: %s", exc)


def connect(ray, address: str | None, **init_kwargs: Any) -> bool:
    """Connect to the Ray cluster at `address` or $RAY_ADDRESS (how it is exposed is the cluster's own choice), or
    start a local instance that listens on loopback only, without dashboard, one CPU slot per core unless
    `init_kwargs` (for `ray.init`) say otherwise. True if this call started one (to shut down at the end).
    A process already connected to Ray keeps that connection."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **init_kwargs)
        return False
    from ray._private import ray_constants

    # Ray replaces a node IP of 127.0.0.1 by this machine's outward IP (services.resolve_ip_for_localhost), and
    # its gRPC servers then listen on every interface; as a single-machine instance (what it is on macOS and
    # Windows: ENABLE_RAY_CLUSTER false) it keeps 127.0.0.1, and gcs_server, raylet, the runtime-env agent, the
    # driver and every worker bind loopback only. The switch is read only while the node's IP is chosen.
    multi_node = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            _node_ip_address="127.0.0.1", include_dashboard=False, **{"num_cpus": os.cpu_count() or 1, **init_kwargs}
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = multi_node
    return True


def _task_error_reason(ray, exc) -> str:
    """One line from the job's own exception inside Ray's wrapper."""
    cause = getattr(exc, "cause", None)
    if cause is not None and not isinstance(cause, ray.exceptions.RayError):
        return failure_reason(cause)
    lines = [line.strip() for line in (getattr(exc, "traceback_str", None) or str(exc)).splitlines()]
    lines = [line for line in lines if line]
    return " ".join(lines[-1].split())[:500] if lines else type(exc).__name__


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise ImportError(RAY_MISSING) from exc
    return ray
