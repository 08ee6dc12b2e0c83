"""Which executor runs a sweep's jobs or a study's trials: the one place one is built (kept apart from
`executor`, which both executors import)."""

from __future__ import annotations

from typing import Literal

from harness.engine.executor import RetryingExecutor


def make_executor(
    kind: Literal["local", "ray"],
    *,
    workers: int | None,
    timeout_s: float | None,
    retries: int,
    address: str | None = None,
    cpus_per_job: float = 1.0,
    gpus_per_job: float = 0.0,
    log_to_driver: bool = True,
) -> RetryingExecutor:
    """The one place an executor is built (`harness sweep`, `--until-decided`, `harness tune`): `local` runs
    `workers` jobs at once in processes here; `ray` runs them as Ray tasks (`address`: a cluster, None: a local
    instance) of `cpus_per_job`/`gpus_per_job` each, at most `workers` in flight (None: as the cluster fits)."""
    if kind == "ray":
        from harness.engine.ray_executor import RayExecutor

        return RayExecutor(
            address,
            cpus_per_job=cpus_per_job,
            gpus_per_job=gpus_per_job,
            timeout_s=timeout_s,
            retries=retries,
            max_in_flight=workers,
            log_to_driver=log_to_driver,
        )
    from harness.engine.local import LocalExecutor

    return LocalExecutor(workers=workers or 1, timeout_s=timeout_s, retries=retries)
