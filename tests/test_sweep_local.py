"""Sweeps on the local executor end to end: real tiny runs in spawned processes, a real SQLite store.

Failures are real too (a spawned child cannot be monkeypatched): a CUDA device on this CPU machine,
a time limit, a SIGKILL of a worker, Ctrl-C, and a SIGKILL of the whole sweep process group.
"""

import os
import signal
import threading
import time
from pathlib import Path

import mlflow
import pytest
from fake_sweep import plan_of
from mlflow.tracking import MlflowClient

from harness.config.job import Job
from harness.config.run_config import load_run_config
from harness.engine.local import LocalExecutor
from harness.engine.resume import job_runs
from harness.engine.sweep import run_sweep
from harness.runs.writer import prepare_store

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
EXPERIMENT = "toy"  # ablations/toy_run.yaml's


@pytest.fixture(scope="module")
def overrides(tiny_run_overrides):
    """The tiny-run overrides, with the toy model built here once so that workers only load it."""
    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny_run_overrides)
    ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    return tiny_run_overrides


def _job(overrides, seed, *extra):
    return Job(config=load_run_config(TOY_RUN, [*overrides, f"seed={seed}", *extra]), arm="a")


def _uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _runs(uri, sweep_id):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    return client.search_runs([exp.experiment_id], f"tags.sweep_id = '{sweep_id}'")


def _sweep(uri, jobs, executor, sweep_id="s1"):
    plan = plan_of("test", sweep_id, EXPERIMENT, {"grid": {"seed": [j.seed for j in jobs]}}, jobs)
    return run_sweep(plan, executor=executor, tracking_uri=uri, console=False)


def test_sweep_runs_all_jobs_under_parent_and_rerun_trains_nothing(tmp_path, overrides, capsys):
    uri = _uri(tmp_path)
    jobs = [_job(overrides, seed) for seed in range(3)]
    result = _sweep(uri, jobs, LocalExecutor(workers=2))
    assert result.ok and not result.skipped
    assert sorted(o.job_id for o in result.finished) == sorted(j.job_id for j in jobs)
    runs = _runs(uri, "s1")
    (parent,) = [r for r in runs if r.data.tags.get("sweep_parent") == "1"]
    children = [r for r in runs if r is not parent]
    assert parent.info.status == "FINISHED" and parent.data.params["grid.seed"] == "[0, 1, 2]"
    assert "sweep.yaml" in {a.path for a in MlflowClient(uri).list_artifacts(parent.info.run_id)}
    planned = mlflow.artifacts.load_dict(f"{parent.info.artifact_uri}/jobs.json")
    assert parent.data.tags["n_jobs"] == "3" and [j["job_id"] for j in planned["jobs"]] == [j.job_id for j in jobs]
    assert sorted(r.data.tags["job_id"] for r in children) == sorted(j.job_id for j in jobs)
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id and run.data.tags["sweep_id"] == "s1"

    again = run_sweep(plan_of("test", "s1", EXPERIMENT, {}, jobs), executor=LocalExecutor(workers=2), tracking_uri=uri)
    assert len(again.skipped) == 3 and not again.finished and not again.failed
    assert "all 3 jobs are done" in capsys.readouterr().err
    assert len(_runs(uri, "s1")) == len(runs)  # no new runs, the parent reused
    assert again.parent_run_id == parent.info.run_id


def test_failing_job_is_retried_recorded_and_does_not_stop_the_others(tmp_path, overrides):
    uri = _uri(tmp_path)
    good, bad = _job(overrides, 0), _job(overrides, 1, "train.device=cuda")  # no CUDA here: raises at run time
    events = []
    executor = LocalExecutor(workers=2, retries=1)
    outcomes = executor.run(
        [bad, good],
        tracking_uri=uri,
        sweep_id="s2",
        parent_run_id=None,
        on_event=lambda kind, job, _: events.append((kind, job.seed)),
    )
    assert [o.status for o in outcomes] == ["FAILED", "FINISHED"]
    assert outcomes[0].attempts == 2 and "cuda" in outcomes[0].reason
    assert ("retrying", 1) in events and ("failed", 1) in events and ("finished", 0) in events
    assert job_runs(uri, EXPERIMENT, "s2") == {good.job_id: ["FINISHED"], bad.job_id: ["FAILED", "FAILED"]}
    for run in _runs(uri, "s2"):
        if run.data.tags["job_id"] == bad.job_id:  # every attempt is history, with its reason
            assert run.data.tags["status"] == "FAILED" and "cuda" in run.data.tags["failure_reason"]
    # named by arm and seed, both the worker's run and the FAILED ones recorded for it
    assert sorted(r.info.run_name for r in _runs(uri, "s2")) == ["a-s0", "a-s1", "a-s1"]

    result = _sweep(
        uri, [good, bad], LocalExecutor(workers=1), sweep_id="s2"
    )  # the sweep view: it is listed, parent FAILED
    assert [o.job_id for o in result.failed] == [bad.job_id] and [j.job_id for j in result.skipped] == [good.job_id]
    assert MlflowClient(uri).get_run(result.parent_run_id).info.status == "FAILED"


def test_timeout_kills_the_job_and_fails_its_run(tmp_path, overrides):
    uri = _uri(tmp_path)
    job = _job(overrides, 0, "train.steps=100000")
    (outcome,) = LocalExecutor(workers=1, timeout_s=2).run([job], tracking_uri=uri, sweep_id="s3", parent_run_id=None)
    assert outcome.status == "FAILED" and outcome.reason == "timeout after 2 s" and outcome.seconds < 15
    (run,) = _runs(uri, "s3")
    assert run.info.status == "FAILED" and run.data.tags["failure_reason"] == "timeout after 2 s"


def _poll(uri: str, sweep_id: str) -> dict[str, list[str]]:
    """job_runs for a watcher racing the workers' writes: a busy SQLite read counts as nothing yet."""
    try:
        return job_runs(uri, EXPERIMENT, sweep_id)
    except Exception:  # noqa: BLE001 - e.g. "database is locked" while a worker logs
        return {}


def test_killed_worker_fails_its_running_run(tmp_path, overrides):
    import multiprocessing

    uri = _uri(tmp_path)
    job = _job(overrides, 0, "train.steps=100000")

    def kill_once_running():  # SIGKILL the worker once its run is in the store, as the OOM killer would
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if "RUNNING" in _poll(uri, "s4").get(job.job_id, []):
                for child in multiprocessing.active_children():
                    os.kill(child.pid, signal.SIGKILL)
                return
            time.sleep(0.3)

    killer = threading.Thread(target=kill_once_running, daemon=True)
    prepare_store(uri, EXPERIMENT)
    killer.start()
    (outcome,) = LocalExecutor(workers=1, timeout_s=150).run([job], tracking_uri=uri, sweep_id="s4", parent_run_id=None)
    killer.join()
    assert outcome.reason == f"worker died (exit code {-signal.SIGKILL})"
    (run,) = _runs(uri, "s4")
    assert run.info.run_id == outcome.run_id and run.info.status == "FAILED"
    assert run.data.tags["failure_reason"] == outcome.reason and run.data.tags["status"] == "FAILED"


def test_ctrl_c_fails_running_runs_and_reraises(tmp_path, overrides):
    uri = _uri(tmp_path)
    job = _job(overrides, 0, "train.steps=100000")
    prepare_store(uri, EXPERIMENT)

    def interrupt_once_running():  # what Ctrl-C does to the sweep process
        while "RUNNING" not in _poll(uri, "s6").get(job.job_id, []):
            time.sleep(0.3)
        # to the main thread, as a terminal's Ctrl-C reaches a one-threaded CLI (os.kill may pick this thread)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    try:
        result = _sweep(uri, [job], LocalExecutor(workers=1, timeout_s=150), sweep_id="s6")
    except KeyboardInterrupt:
        pass
    else:  # say what ended the sweep instead
        pytest.fail(
            f"the sweep ended without the interrupt: failed {result.failed}; runs "
            f"{[(r.info.status, r.data.tags.get('failure_reason')) for r in _runs(uri, 's6')]}"
        )
    runs = _runs(uri, "s6")
    assert len(runs) == 2  # the job's run and the parent
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["failure_reason"] == "interrupted"


def test_the_logged_progress_line_counts_the_jobs_that_run():
    """Into a log, the line after a job ends waits for the queued job that takes its slot: with 2 workers busy it
    says 2 running, not the 1 of the instant between them; the last jobs print as they end."""
    import io

    from rich.console import Console

    from harness.engine.sweep import _Progress

    buf = io.StringIO()
    a, b, c = (Job(config=load_run_config(TOY_RUN, [f"seed={seed}"]), arm="a") for seed in range(3))
    view = _Progress("t", [a, b, c], [], workers=2, log=Console(file=buf, width=300))
    view.on_event("started", a, None), view.on_event("started", b, None)
    view.on_event("finished", a, None)
    assert buf.getvalue() == ""  # c is queued: its start prints the line
    view.on_event("started", c, None)
    view.on_event("finished", b, None)
    view.on_event("failed", c, None)
    lines = [line.split(" |")[0] for line in buf.getvalue().splitlines()]
    assert lines == [
        "sweep t: 1/3 done, 2 running, 0 failed, 0 skipped",
        "sweep t: 2/3 done, 1 running, 0 failed, 0 skipped",
        "sweep t: 2/3 done, 0 running, 1 failed, 0 skipped",
    ]


def test_warm_starts_the_fork_server_before_any_worker_is_launched(tmp_path):
    """`run_sweep` calls `executor.warm()` before it prepares the store, so that the fork server's imports overlap
    that work: after `warm()` alone, a fork server is this process's child (checked in a fresh interpreter)."""
    import subprocess
    import sys

    probe = (
        "import os, pathlib\n"
        "from harness.engine.local import LocalExecutor\n"
        "LocalExecutor(workers=1).warm()\n"
        "me = str(os.getpid())\n"
        "found = [p for p in pathlib.Path('/proc').iterdir() if p.name.isdigit() and "
        "(p / 'stat').exists() and (p / 'stat').read_text().rsplit(')', 1)[1].split()[1] == me]\n"
        "print(any(b'forkserver' in (p / 'cmdline').read_bytes() for p in found))\n"
    )
    root, log = Path(__file__).resolve().parents[1], tmp_path / "probe.log"
    with open(log, "w") as out:  # a file, not a pipe: the fork server keeps a pipe open until its imports end
        subprocess.run([sys.executable, "-c", probe], cwd=root, stdout=out, stderr=subprocess.STDOUT, timeout=120)
    assert log.read_text().strip().splitlines()[-1] == "True", log.read_text()[-2000:]
