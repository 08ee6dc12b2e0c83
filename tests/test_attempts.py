"""`run_attempts`, the one loop of every executor, on an in-process launcher: slots, retries, time limits,
failures recorded in a real SQLite MLflow store, tasks drawn as slots free up, and a stop mid-way."""

import time
from functools import partial
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.config.job import Job
from harness.config.run_config import load_run_config
from harness.engine.executor import Task, job_tags, record_failure, run_attempts
from harness.runs.writer import prepare_store

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"


class Hang(Exception):
    """Raised by a fake attempt that is still running."""


def finish(run_id, uri):
    return run_id


def fail(uri):
    raise RuntimeError("no luck")


def hang(uri):
    raise Hang


class FakeLauncher:
    """Attempts are calls made when waited for: a return ends one, an exception fails it, `Hang` keeps it running."""

    poll_s = 0.05

    def __init__(self, slots: int):
        self.slots, self.live, self.killed, self.launched, self.most = slots, {}, [], [], 0

    def launch(self, call, name):
        handle = len(self.launched)
        self.launched.append(name)
        self.live[handle] = call
        self.most = max(self.most, len(self.live))
        return handle

    def wait(self, handles, timeout):
        ended = []
        for handle in handles:
            try:
                value = self.live[handle]()
            except Hang:
                continue
            except Exception as exc:  # noqa: BLE001
                ended.append((handle, None, str(exc)))
            else:
                ended.append((handle, value, None))
            del self.live[handle]
        if not ended:
            time.sleep(timeout)
        return ended

    def kill(self, handles):
        for handle in handles:
            self.killed.append(handle)
            del self.live[handle]


@pytest.fixture
def uri(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    prepare_store(uri, "toy")
    return uri


def _job(seed: int) -> Job:
    return Job(config=load_run_config(TOY_RUN, [f"seed={seed}"]), arm="a")


def _runs(uri):
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name("toy").experiment_id])


def test_retries_go_first_failures_and_timeouts_are_failed_runs_with_their_reason(uri):
    jobs = [_job(seed) for seed in range(3)]
    calls = [partial(finish, "run-0"), fail, hang]
    tasks = iter([Task(j, c, {**job_tags(j, None), "extra": str(i)}) for i, (j, c) in enumerate(zip(jobs, calls))])
    events = []
    launcher = FakeLauncher(slots=2)
    outcomes = run_attempts(
        launcher,
        lambda: next(tasks, None),
        tracking_uri=uri,
        sweep_id="s",
        timeout_s=0.5,
        retries=1,
        on_event=lambda kind, job, _: events.append((kind, job.seed)),
    )
    assert [(o.status, o.reason, o.attempts) for o in outcomes] == [
        ("FINISHED", None, 1),
        ("FAILED", "no luck", 2),
        ("FAILED", "timeout after 0.5 s", 2),
    ]
    assert outcomes[0].run_id == "run-0" and launcher.most == 2 and len(launcher.killed) == 2
    # the failed job's retry starts before the third job, which waited for a slot
    assert events[:5] == [("started", 0), ("started", 1), ("finished", 0), ("retrying", 1), ("started", 1)]
    assert events[5:7] == [("started", 2), ("failed", 1)] and events[-1] == ("failed", 2)
    runs = _runs(uri)  # none of the attempts made a run: one FAILED run each, with the task's tags
    assert sorted((r.data.tags["seed"], r.data.tags["failure_reason"]) for r in runs) == [
        ("1", "no luck"),
        ("1", "no luck"),
        ("2", "timeout after 0.5 s"),
        ("2", "timeout after 0.5 s"),
    ]
    for run in runs:
        assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"
        assert run.data.tags["extra"] == str(run.data.tags["seed"]) and run.data.tags["arm_label"] == "a"
        assert run.data.tags["sweep_id"] == "s"
    assert {o.run_id for o in outcomes[1:]} <= {r.info.run_id for r in runs}  # each job's last attempt


def test_tasks_are_drawn_as_slots_free_and_each_ending_is_told_once(uri):
    """A source that has nothing now may have something after a task ends (as a study does after a failure)."""
    told, drawn = [], []

    def next_task():
        if len(drawn) == 3 or (drawn and not told):  # the second only once the first was told
            return None
        job = _job(len(drawn))
        drawn.append(job)
        return Task(job, fail if len(drawn) == 1 else partial(finish, f"run-{len(drawn)}"), {}, done=told.append)

    outcomes = run_attempts(FakeLauncher(slots=2), next_task, tracking_uri=uri, sweep_id="s", timeout_s=None, retries=0)
    assert [o.status for o in outcomes] == ["FAILED", "FINISHED", "FINISHED"] and told == outcomes


def test_a_stop_kills_the_running_attempts_and_fails_their_runs(uri):
    jobs = [_job(seed) for seed in range(3)]
    tasks = iter([Task(jobs[0], partial(finish, "run-0"), {}), Task(jobs[1], hang, {}), Task(jobs[2], hang, {})])
    launcher = FakeLauncher(slots=2)

    def on_event(kind, job, outcome):
        if kind == "finished":
            raise KeyboardInterrupt  # Ctrl-C while job 1 runs, job 2 still waiting

    with pytest.raises(KeyboardInterrupt):
        run_attempts(
            launcher,
            lambda: next(tasks, None),
            tracking_uri=uri,
            sweep_id="s",
            timeout_s=None,
            retries=3,
            on_event=on_event,
        )
    assert launcher.killed == [1] and not launcher.live
    (run,) = _runs(uri)
    assert run.data.tags["seed"] == "1" and run.data.tags["failure_reason"] == "interrupted"


def test_record_failure_ends_only_the_run_its_key_names(uri):
    """Two trials of one config share a job id: the trial tag tells their runs apart."""
    job = _job(0)
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("toy").experiment_id
    since = int(time.time() * 1000) - 1000
    runs = {
        trial: client.create_run(
            experiment_id, tags={"sweep_id": "s", "job_id": job.job_id, "trial": trial}
        ).info.run_id
        for trial in ("0", "1")
    }
    task = Task(job, fail, {"trial": "1"}, key=("trial",))
    assert record_failure(client, uri, task, "s", "timeout after 1 s", since) == runs["1"]
    assert client.get_run(runs["1"]).info.status == "FAILED" and client.get_run(runs["0"]).info.status == "RUNNING"
    assert client.get_run(runs["1"]).data.tags["failure_reason"] == "timeout after 1 s"
