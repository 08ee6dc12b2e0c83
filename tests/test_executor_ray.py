"""RayExecutor end to end: tiny toy jobs as tasks of a real local Ray instance, a real SQLite store."""

from importlib.util import find_spec
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]'): RayExecutor tests skipped")

from mlflow.tracking import MlflowClient  # noqa: E402

from harness.config.job import Job  # noqa: E402
from harness.config.run_config import load_run_config  # noqa: E402
from harness.engine.ray_executor import RayExecutor, connect  # noqa: E402
from harness.runs.writer import prepare_store  # noqa: E402
from trainer.models.toy import ensure_toy_model  # noqa: E402

pytestmark = pytest.mark.slow  # a local Ray instance

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
SWEEP = "sweep-ray-test"
# with the trl extra (CI has it) one job trains with TRL's GRPOTrainer
TRL_ENGINE = ("train.engine=trl", "objective.adv_eps=0.0001", "train.reference_kl=false") if find_spec("trl") else ()


@pytest.fixture(scope="module")
def local_ray():
    """One local instance for the module (num_cpus=2, loopback only); the executor finds it and leaves it running."""
    connect(ray, None, num_cpus=2, log_to_driver=False)
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
    jobs = [
        _job(tmp_path, tiny_run_overrides, "seed=0"),
        _job(tmp_path, tiny_run_overrides, "seed=1", *TRL_ENGINE),
        _job(tmp_path, tiny_run_overrides, "seed=2", "train.device=cuda"),
    ]  # job 2 is CPU-only: raises in the worker
    uri, client = _store(tmp_path, jobs[0])
    parent = client.create_run(prepare_store(uri, "toy"), run_name="sweep").info.run_id
    events = []
    outcomes = RayExecutor(None, cpus_per_job=1, gpus_per_job=0, timeout_s=None, retries=1).run(
        jobs,
        tracking_uri=uri,
        sweep_id=SWEEP,
        parent_run_id=parent,
        on_event=lambda kind, job, outcome: events.append((kind, job.job_id)),
    )

    assert [o.job_id for o in outcomes] == [j.job_id for j in jobs]
    ok, failed = outcomes[:2], outcomes[2]
    for outcome, job in zip(ok, jobs):
        assert outcome.status == "FINISHED" and outcome.reason is None and outcome.attempts == 1
        run = client.get_run(outcome.run_id)
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "FINISHED"
        assert run.data.tags["sweep_id"] == SWEEP and run.data.tags["job_id"] == job.job_id
        assert run.data.tags["mlflow.parentRunId"] == parent and run.data.tags["seed"] == str(job.seed)
        assert run.data.params["train.engine"] == job.config.train.engine and "train/accuracy" in run.data.metrics
    assert failed.status == "FAILED" and failed.attempts == 2
    assert failed.reason == "RuntimeError: train.device is 'cuda' but no CUDA device is available"
    # it failed before creating a run: the executor made one FAILED run per attempt
    runs = client.search_runs([prepare_store(uri, "toy")], f"tags.job_id = '{jobs[2].job_id}'")
    assert failed.run_id == runs[0].info.run_id and len(runs) == 2
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["failure_reason"] == failed.reason
        assert run.data.tags["sweep_id"] == SWEEP and run.data.tags["mlflow.parentRunId"] == parent
    expected = [("started", j.job_id) for j in jobs] + [
        ("finished", jobs[0].job_id),
        ("finished", jobs[1].job_id),
        ("retrying", jobs[2].job_id),
        ("started", jobs[2].job_id),
        ("failed", jobs[2].job_id),
    ]
    assert sorted(events) == sorted(expected)
    assert ray.is_initialized()  # a Ray instance it did not start is left running


def test_timeout_kills_the_job_and_ends_its_run_failed(local_ray, tmp_path, tiny_run_overrides):
    job = _job(tmp_path, tiny_run_overrides, "train.steps=100000")  # would run for hours
    uri, client = _store(tmp_path, job)
    events = []
    (outcome,) = RayExecutor(None, cpus_per_job=1, gpus_per_job=0, timeout_s=12, retries=0).run(
        [job],
        tracking_uri=uri,
        sweep_id=SWEEP,
        parent_run_id=None,
        on_event=lambda kind, job, outcome: events.append(kind),
    )

    assert outcome.status == "FAILED" and outcome.reason == "timeout after 12 s" and outcome.attempts == 1
    assert 12 <= outcome.seconds < 32 and events == ["started", "failed"]
    (run,) = client.search_runs(
        [client.get_experiment_by_name("toy").experiment_id], filter_string=f"tags.job_id = '{job.job_id}'"
    )
    assert run.info.run_id == outcome.run_id and run.data.params["train.steps"] == "100000"  # the worker's run
    assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"
    assert run.data.tags["failure_reason"] == "timeout after 12 s" and "mlflow.parentRunId" not in run.data.tags
    assert run.data.metrics  # it was training when it was killed


_LOCAL_RAY = """
import os, sys
import ray
from harness.engine.ray_executor import RayExecutor


def pid():
    return os.getpid()


assert RayExecutor(None)._connect(ray), "a local instance was expected"
print(ray.get([ray.remote(pid).remote() for _ in range(2)]), flush=True)  # workers are up
sys.stdin.read()  # until the test has looked
ray.shutdown()
"""


def test_local_instance_listens_on_loopback_only(tmp_path):
    """Every socket that the executor's local Ray listens on (gcs_server, raylet, agents, the driver's and the
    workers' gRPC servers) is bound to a loopback address."""
    import ipaddress
    import os
    import subprocess
    import sys

    psutil = pytest.importorskip("psutil")  # Ray's own dependency (vendored under ray/thirdparty_files)
    env = {**os.environ, "PYTHONPATH": str(TOY_RUN.parents[1]), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = tmp_path / "ray.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LOCAL_RAY],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    try:
        assert proc.stdout.readline().startswith("["), f"the local Ray did not start:\n{log.read_text()}"
        driver = psutil.Process(proc.pid)
        procs = {p.pid: p for p in [driver, *driver.children(recursive=True)]}
        listening = sorted(
            {
                (procs[c.pid].name(), c.laddr.ip, c.laddr.port)
                for c in psutil.net_connections("inet")
                if c.status == psutil.CONN_LISTEN and c.pid in procs
            }
        )
        assert {name for name, *_ in listening} >= {"gcs_server", "raylet"}, listening

        def loopback(ip: str) -> bool:
            addr = ipaddress.ip_address(ip.split("%")[0])
            return addr.is_loopback or bool(getattr(addr, "ipv4_mapped", None) and addr.ipv4_mapped.is_loopback)

        exposed = [f"{name} {ip}:{port}" for name, ip, port in listening if not loopback(ip)]
        assert not exposed, f"listening beyond loopback: {exposed} (all: {listening})"
    finally:
        proc.stdin.close()  # the script shuts its Ray down
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
