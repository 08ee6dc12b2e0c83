"""RayExecutor end to end: tiny toy jobs as tasks of a real local Ray instance, a real SQLite store."""

from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]'): RayExecutor tests skipped")

from mlflow.tracking import MlflowClient  # noqa: E402

from harness.config import load_run_config  # noqa: E402
from harness.executor.ray_executor import RayExecutor  # noqa: E402
from harness.jobs import Job  # noqa: E402
from harness.tracking import prepare_store  # noqa: E402
from trainer.models.toy import ensure_toy_model  # noqa: E402

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
SWEEP = "sweep-ray-test"


@pytest.fixture(scope="module")
def local_ray():
    """One local instance for the module (num_cpus=2); the executor finds it and leaves it running."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _job(tmp_path, overrides, *extra) -> Job:
    cfg = load_run_config(TOY_RUN, [*overrides, f"tracking.results_dir={tmp_path}", *extra])
    return Job(config=cfg, arm="a")


def _store(tmp_path, job: Job) -> tuple[str, MlflowClient]:
    uri = f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    prepare_store(uri, job.config.tracking.experiment)
    ensure_toy_model(job.config.model.toy, job.config.model.cache_dir)  # built once here; workers only load it
    return uri, MlflowClient(uri)


def test_jobs_finish_and_a_failing_one_is_retried_then_failed_with_reason(local_ray, tmp_path, tiny_run_overrides):
    jobs = [_job(tmp_path, tiny_run_overrides, "seed=0"), _job(tmp_path, tiny_run_overrides, "seed=1"),
            _job(tmp_path, tiny_run_overrides, "seed=2", "train.device=cuda")]  # CPU-only: raises in the worker
    uri, client = _store(tmp_path, jobs[0])
    parent = client.create_run(prepare_store(uri, "toy"), run_name="sweep").info.run_id
    events = []
    outcomes = RayExecutor(None, cpus_per_job=1, gpus_per_job=0, timeout_s=None, retries=1).run(
        jobs, tracking_uri=uri, sweep_id=SWEEP, parent_run_id=parent,
        on_event=lambda kind, job, outcome: events.append((kind, job.job_id)))

    assert [o.job_id for o in outcomes] == [j.job_id for j in jobs]
    ok, failed = outcomes[:2], outcomes[2]
    for outcome, job in zip(ok, jobs):
        assert outcome.status == "FINISHED" and outcome.reason is None and outcome.attempts == 1
        run = client.get_run(outcome.run_id)
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "FINISHED"
        assert run.data.tags["sweep_id"] == SWEEP and run.data.tags["job_id"] == job.job_id
        assert run.data.tags["mlflow.parentRunId"] == parent and run.data.tags["seed"] == str(job.seed)
    assert failed.status == "FAILED" and failed.attempts == 2
    assert failed.reason == "RuntimeError: train.device is 'cuda' but no CUDA device is available"
    # it failed before creating a run: the executor made one FAILED run per attempt
    runs = client.search_runs([prepare_store(uri, "toy")], f"tags.job_id = '{jobs[2].job_id}'")
    assert failed.run_id == runs[0].info.run_id and len(runs) == 2
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["failure_reason"] == failed.reason
        assert run.data.tags["sweep_id"] == SWEEP and run.data.tags["mlflow.parentRunId"] == parent
    expected = [("started", j.job_id) for j in jobs] + [("finished", jobs[0].job_id), ("finished", jobs[1].job_id),
                ("retrying", jobs[2].job_id), ("started", jobs[2].job_id), ("failed", jobs[2].job_id)]
    assert sorted(events) == sorted(expected)
    assert ray.is_initialized()  # a Ray instance it did not start is left running


def test_timeout_kills_the_job_and_ends_its_run_failed(local_ray, tmp_path, tiny_run_overrides):
    job = _job(tmp_path, tiny_run_overrides, "train.steps=100000")  # would run for hours
    uri, client = _store(tmp_path, job)
    events = []
    (outcome,) = RayExecutor(None, cpus_per_job=1, gpus_per_job=0, timeout_s=20, retries=0).run(
        [job], tracking_uri=uri, sweep_id=SWEEP, parent_run_id=None,
        on_event=lambda kind, job, outcome: events.append(kind))

    assert outcome.status == "FAILED" and outcome.reason == "timeout after 20 s" and outcome.attempts == 1
    assert 20 <= outcome.seconds < 40 and events == ["started", "failed"]
    (run,) = client.search_runs([client.get_experiment_by_name("toy").experiment_id],
                                filter_string=f"tags.job_id = '{job.job_id}'")
    assert run.info.run_id == outcome.run_id and run.data.params["train.steps"] == "100000"  # the worker's run
    assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"
    assert run.data.tags["failure_reason"] == "timeout after 20 s" and "mlflow.parentRunId" not in run.data.tags
    assert run.data.metrics  # it was training when it was killed
