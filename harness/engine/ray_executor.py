"""Run a sweep's jobs as Ray tasks: on a local Ray instance or on an existing cluster.

Each attempt of a job is one Ray task (a fresh worker process) that calls `harness.engine.executor.run_job`,
so the MLflow run is created and ended by the worker exactly as in `harness run`. This module only
starts, waits for and cancels tasks and tells why one died; the time limit, the retries and the
failures recorded in MLflow are `harness.engine.executor.run_attempts`', as for `LocalExecutor`.

Tracking URI: every worker writes to the store itself. A `sqlite:///<absolute path>` works for a
local instance (all workers share this machine's file system). A cluster of several machines
needs a store every node can reach: an MLflow tracking server (`--tracking-uri http://host:5000`).
The nodes of such a cluster also need harness installed (same version as the driver).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.engine.executor import RetryingExecutor
from harness.runs.layout import RAY_NODE_ENV, SQLITE_PREFIX
from harness.runs.writer import failure_reason

RAY_MISSING = "--executor ray needs the ray extra: pip install 'harness[ray]'"
WORKER_DIED = "worker died"
_POLL_S = 1.0
"""How often the driver wakes to check deadlines when nothing finishes."""
_CANCEL_GRACE_S = 10.0
"""How long to wait for force-cancelled workers to exit before ending their runs FAILED."""
_log = logging.getLogger(__name__)


def _worker_entry(call: Callable[[], Any]) -> Any:
    """Body of the Ray task (module level, so workers import it by name rather than by pickle). The run it makes is
    tagged with this worker's node (a fresh process per attempt: the variable is this attempt's alone)."""
    import ray

    os.environ[RAY_NODE_ENV] = ray.get_runtime_context().get_node_id()
    return call()


class RayExecutor(RetryingExecutor):
    """Executor that runs each job as one Ray task.

    `address=None` starts a local Ray instance (loopback only, no dashboard, one CPU slot per core)
    and shuts it down at the end; an address ("auto", "ray://host:10001") connects to an existing
    cluster and leaves it running. If this process is already connected to Ray, that connection
    is used as it is. At most as many jobs are in flight as the cluster has slots for
    (`cpus_per_job`, `gpus_per_job`), and `max_in_flight`, so that a job's time limit counts from about
    when it starts.
    """

    def __init__(
        self,
        address: str | None = None,
        cpus_per_job: float = 1.0,
        gpus_per_job: float = 0.0,
        timeout_s: float | None = None,
        retries: int = 0,
        max_in_flight: int | None = None,
        log_to_driver: bool = True,
    ):
        if cpus_per_job <= 0 and gpus_per_job <= 0:
            raise ValueError("a job needs cpus_per_job > 0 or gpus_per_job > 0")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        _import_ray()  # fail before the sweep starts, not after its parent run is created
        self.address = address
        """Ray cluster address ("auto", "ray://host:port"); None starts a local instance."""
        self.cpus_per_job = cpus_per_job
        """CPUs Ray reserves for each job's task."""
        self.gpus_per_job = gpus_per_job
        """GPUs Ray reserves for each job's task (fractions share a GPU)."""
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_in_flight = max_in_flight
        """At most this many jobs at once (None: as many as the cluster fits)."""
        self.log_to_driver = log_to_driver
        """Whether the workers' output is printed here (when this executor connects to Ray)."""

    @contextmanager
    def launcher(self) -> Iterator[_Tasks]:
        ray = _import_ray()
        started_here = self._connect(ray)
        try:
            slots = self._slots(ray)
            yield _Tasks(ray, self._remote(ray), min(slots, self.max_in_flight or slots))
        finally:
            if started_here:
                ray.shutdown()

    # -- connection ----------------------------------------------------------------------------
    def _connect(self, ray) -> bool:
        """Connect to Ray; True if this call started a local instance (to shut down at the end)."""
        return connect(ray, self.address, **({} if self.log_to_driver else {"log_to_driver": False}))

    def worker_uri(self, uri: str) -> str:
        """Make a SQLite path absolute (workers do not share the driver's cwd); warn when a cluster
        is given a store that only this machine can see."""
        if uri.startswith(SQLITE_PREFIX):
            path = uri[len(SQLITE_PREFIX) :]
            if path and path != ":memory:" and not Path(path.split("?", 1)[0]).is_absolute():
                uri = SQLITE_PREFIX + str(Path(path).resolve())
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

    def _remote(self, ray):
        """The Ray task; max_calls=1: a fresh process (and GPU memory) per attempt."""
        return ray.remote(num_cpus=self.cpus_per_job, num_gpus=self.gpus_per_job, max_retries=0, max_calls=1)(
            _worker_entry
        )


class _Tasks:
    """The Ray `Launcher`: a Ray task per attempt."""

    poll_s = _POLL_S

    def __init__(self, ray, task, slots: int):
        self.ray, self.task, self.slots = ray, task, slots

    def launch(self, call: Callable[[], Any], name: str) -> Any:
        return self.task.remote(call)

    def wait(self, handles: list, timeout: float) -> list[tuple[Any, Any, str | None]]:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        return [(ref, *_collect(self.ray, ref)) for ref in ready]

    def kill(self, handles: list) -> None:
        _cancel(self.ray, handles)


def _collect(ray, ref) -> tuple[Any, str | None]:
    """(returned value, failure reason) of a task that has ended."""
    try:
        return ray.get(ref), None
    except ray.exceptions.RayTaskError as exc:  # the job raised: report the job's own exception
        return None, _task_error_reason(ray, exc)
    except ray.exceptions.OutOfMemoryError:  # Ray's memory monitor killed the worker
        return None, f"{WORKER_DIED} (out of memory)"
    except (
        ray.exceptions.WorkerCrashedError,
        ray.exceptions.TaskCancelledError,
        ray.exceptions.NodeDiedError,
        ray.exceptions.LocalRayletDiedError,
    ):
        return None, WORKER_DIED
    except ray.exceptions.RayError as exc:  # anything else Ray could not deliver
        return None, f"{WORKER_DIED} ({failure_reason(exc)})"


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
