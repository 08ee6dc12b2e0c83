"""What a sweep already did, read back from the MLflow store, so that a rerun resumes it.

The store is the only record of progress: a job is done when its job id has a FINISHED run
tagged with the sweep id. Nothing is kept on the side that could disagree with MLflow.
"""

from __future__ import annotations

from collections import defaultdict

from mlflow.entities import Run, RunStatus, RunTag
from mlflow.tracking import MlflowClient

from harness.engine.cost import Measured
from harness.runs.layout import ARM_TAG, FAILURE_REASON_TAG, JOB_ID_TAG, STATUS_TAG, SWEEP_ID_TAG
from harness.runs.writer import store_client

_PAGE = 1000


def quote_value(value: str) -> str:
    """A string literal for an MLflow search filter."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sweep_runs(client: MlflowClient, experiment_name: str, sweep_id: str, where: str = "") -> list[Run]:
    """Every run tagged with `sweep_id` (parent included), in one paginated `search_runs` query."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return []
    query = f"tags.{SWEEP_ID_TAG} = {quote_value(sweep_id)}" + (f" AND {where}" if where else "")
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs([experiment.experiment_id], query, max_results=_PAGE, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def job_runs(tracking_uri: str, experiment_name: str, sweep_id: str) -> dict[str, list[str]]:
    """{job_id: [status of each of its runs]} for the sweep (its parent run, which has no job id, left out)."""
    out: dict[str, list[str]] = defaultdict(list)
    for run in sweep_runs(store_client(tracking_uri), experiment_name, sweep_id):
        job_id = run.data.tags.get(JOB_ID_TAG)
        if job_id:
            out[job_id].append(run.info.status)
    return dict(out)


def finished_job_ids(tracking_uri: str, experiment_name: str, sweep_id: str) -> set[str]:
    """Job ids of the sweep that already have a FINISHED run: a rerun skips them."""
    return {
        job for job, statuses in job_runs(tracking_uri, experiment_name, sweep_id).items() if "FINISHED" in statuses
    }


def measured_runs(tracking_uri: str, experiment_name: str, sweep_id: str) -> list[Measured]:
    """How long each FINISHED job run of the sweep took, from MLflow's start and end times of the run (the worker's
    training, model load and evaluation included; not its process start nor any queueing)."""
    client = store_client(tracking_uri)
    return [
        Measured(run.data.tags[ARM_TAG], (run.info.end_time - run.info.start_time) / 1000)
        for run in sweep_runs(client, experiment_name, sweep_id, "attributes.status = 'FINISHED'")
        if run.data.tags.get(JOB_ID_TAG) and run.data.tags.get(ARM_TAG) and run.info.end_time and run.info.start_time
    ]


def end_failed(client: MlflowClient, run_id: str, reason: str) -> None:
    """End one run FAILED with the `status` / `failure_reason` tags every harness run carries."""
    client.log_batch(run_id, tags=[RunTag(STATUS_TAG, "FAILED"), RunTag(FAILURE_REASON_TAG, reason)])
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FAILED))


def fail_orphans(tracking_uri: str, experiment_name: str, sweep_id: str, reason: str) -> int:
    """End FAILED every run of the sweep still RUNNING (its parent run included); return how many.

    Assumes no process of this sweep is alive: call it when the sweep (re)starts, e.g. after the
    previous invocation was SIGKILLed and could not close its runs, holding the sweep's lock
    (`harness.engine.sweep.sweep_lock`), which no other live invocation then holds; its workers died
    with it (`harness.engine.local.die_with_parent`; Ray ends a dead driver's tasks).
    """
    client = MlflowClient(tracking_uri)
    orphans = sweep_runs(client, experiment_name, sweep_id, "attributes.status = 'RUNNING'")
    for run in orphans:
        end_failed(client, run.info.run_id, reason)
    return len(orphans)
